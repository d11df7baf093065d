#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "endpoint.h"
#include "protocol.h"

namespace mslite_triton {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(300);  // a cold start on a busy host: tritonserver and its pools
constexpr auto kStopTimeout = std::chrono::seconds(60);    // `serve` stops tritonserver, the gateway and workers
constexpr char kExitTimeoutS[] = "5";                      // nothing of this process is in flight when it ends

// One `mslite-triton serve` child and what it said. The thread that forks it waits for it: Linux sends the
// parent-death signal (set in the child) when the *thread* that forked it ends, so that thread must live as
// long as the child. An abrupt end of this process ends the thread too, and the server gets SIGTERM.
struct Child {
  std::mutex mutex;
  std::condition_variable changed;
  pid_t pid = -1;
  std::string url;
  std::string key;
  bool serving = false;
  bool exited = false;
  std::string failure;  // why it stopped, for a start that failed
  std::string folder;   // its model repository and log; removed once it has exited
};

std::mutex g_start;                    // one start at a time
std::atomic<Child *> g_child{nullptr};  // the latest server; never freed: its thread and the exit handler use it

std::string Getenv(const char *name) {
  const char *value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// An executable named by `word`: as it is when it holds a '/', else searched on PATH; "" when there is none.
std::string Which(const std::string &word) {
  if (word.find('/') != std::string::npos) return access(word.c_str(), X_OK) == 0 ? word : "";
  std::stringstream path(Getenv("PATH"));
  for (std::string dir; std::getline(path, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + word;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string LastLine(const std::string &file) {
  std::ifstream in(file);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (!Trim(line).empty()) last = Trim(line);
  }
  return last;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// Reads what the server prints at start (its URL, admin key, "serving;"), then waits for it to exit.
void Watch(Child *child, std::vector<std::string> args, int out_read, int out_write, int log_fd, int null_fd) {
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  // The server makes its own key and prints it (read below): a key in the environment is another server's, and
  // `serve` would take it as its own without printing it.
  const std::string key_var = std::string(protocol::ADMIN_KEY_ENV) + "=";
  std::vector<char *> envp;
  for (char **e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, key_var.c_str(), key_var.size()) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {  // async-signal-safe calls only until exec: this process has other threads
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent has gone already
    dup2(null_fd, 0);
    dup2(out_write, 1);
    dup2(log_fd, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(out_write);
  close(log_fd);
  close(null_fd);
  {
    std::lock_guard<std::mutex> lock(child->mutex);
    child->pid = pid;
    if (pid < 0) {
      child->exited = true;
      child->failure = std::string("fork failed: ") + std::strerror(fork_errno);
    }
  }
  child->changed.notify_all();
  if (pid < 0) {
    close(out_read);
    return;
  }
  // Read until "serving;" (or the end); the pipe then stays open, unread, so a late write never fails.
  std::string pending;
  char buffer[4096];
  for (bool serving = false; !serving;) {
    ssize_t n = read(out_read, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    std::lock_guard<std::mutex> lock(child->mutex);
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1)) {
      const std::string line = pending.substr(0, eol);
      if (line.rfind("HTTP ", 0) == 0) child->url = Trim(line.substr(5));
      if (line.rfind("ADMIN KEY ", 0) == 0) child->key = line.substr(10, line.find(' ', 10) - 10);
      if (line.rfind("serving;", 0) == 0) serving = child->serving = !child->url.empty();
    }
    child->changed.notify_all();
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(out_read);
  const std::string why = LastLine(child->folder + "/serve.log");
  std::error_code ignored;
  std::filesystem::remove_all(child->folder, ignored);
  {
    std::lock_guard<std::mutex> lock(child->mutex);
    child->exited = true;
    child->serving = false;
    child->failure = Describe(status) + (why.empty() ? "" : ": " + why);
  }
  child->changed.notify_all();
}

// At exit: SIGTERM to the server this process started, and wait (bounded) until it has stopped.
void StopAtExit() {
  Child *child = g_child.load();
  if (child == nullptr) return;
  std::unique_lock<std::mutex> lock(child->mutex);
  if (child->exited || child->pid <= 0) return;
  kill(child->pid, SIGTERM);
  if (!child->changed.wait_for(lock, kStopTimeout, [child] { return child->exited; })) {
    kill(child->pid, SIGKILL);
    child->changed.wait_for(lock, std::chrono::seconds(10), [child] { return child->exited; });
  }
}

Status Start(std::string *url, std::string *key) {
  std::vector<std::string> words;
  std::stringstream named(Getenv(protocol::SERVE_CMD_ENV));
  for (std::string word; named >> word;) words.push_back(word);
  const bool own_setting = !words.empty();
  if (!own_setting) words.push_back("mslite-triton");
  const std::string program = Which(words[0]);
  if (program.empty()) {
    return Status(kLiteError, "cannot start a server: '" + words[0] + "' is not installed (" +
                                  (own_setting ? std::string(protocol::SERVE_CMD_ENV) + " names it" : "not on PATH") +
                                  "); install the mslite-triton package, name its command in " +
                                  protocol::SERVE_CMD_ENV + ", or give a running server's URL in " +
                                  protocol::URL_ENV + " (or Context::SetServerUrl)");
  }
  std::string folder = (Getenv("TMPDIR").empty() ? "/tmp" : Getenv("TMPDIR")) + "/mslite-triton-cpp-XXXXXX";
  if (mkdtemp(&folder[0]) == nullptr || !std::filesystem::create_directory(folder + "/repository")) {
    return Status(kLiteError, "cannot start a server: no temporary folder: " + std::string(std::strerror(errno)));
  }
  int out[2] = {-1, -1};
  const int log_fd = open((folder + "/serve.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0 || pipe2(out, O_CLOEXEC) != 0) {
    for (int fd : {log_fd, null_fd, out[0], out[1]}) {
      if (fd >= 0) close(fd);
    }
    std::error_code ignored;
    std::filesystem::remove_all(folder, ignored);
    return Status(kLiteError, "cannot start a server: " + std::string(std::strerror(errno)));
  }
  std::vector<std::string> args{program};
  args.insert(args.end(), words.begin() + 1, words.end());
  for (const char *a : {"serve", "--model-repository", ""}) args.push_back(a);
  args.back() = folder + "/repository";
  for (const char *a : {"--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--exit-timeout-s"}) {
    args.push_back(a);
  }
  args.push_back(kExitTimeoutS);

  auto *child = new Child;
  child->folder = folder;
  g_child.store(child);
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(StopAtExit); });
  std::thread(Watch, child, std::move(args), out[0], out[1], log_fd, null_fd).detach();

  std::unique_lock<std::mutex> lock(child->mutex);
  if (!child->changed.wait_for(lock, kStartTimeout, [child] { return child->serving || child->exited; })) {
    if (child->pid > 0) kill(child->pid, SIGTERM);
    return Status(kLiteError, "the server '" + words[0] + " serve' did not start within " +
                                  std::to_string(kStartTimeout.count()) + " s");
  }
  if (!child->serving) {
    return Status(kLiteError, "the server '" + words[0] + " serve' did not start: " + child->failure);
  }
  *url = child->url;
  *key = child->key;
  return kSuccess;
}

}  // namespace

Status ResolveServer(const std::string &explicit_url, std::string *url, std::string *key) {
  *url = explicit_url.empty() ? Getenv(protocol::URL_ENV) : explicit_url;
  if (!url->empty()) {
    *key = AdminKey(*url);
    return kSuccess;
  }
  if (Getenv(protocol::AUTOSTART_ENV) == "0") {
    return Status(kLiteParamInvalid, std::string("no server: call Context::SetServerUrl(\"http://host:8000\") or "
                                                 "set ") + protocol::URL_ENV + " (" + protocol::AUTOSTART_ENV +
                                         "=0 turns starting one off)");
  }
  std::lock_guard<std::mutex> start(g_start);
  Child *child = g_child.load();
  if (child != nullptr) {
    std::lock_guard<std::mutex> lock(child->mutex);
    if (child->serving) {  // started by an earlier build; one that died is started again
      *url = child->url;
      *key = child->key;
      return kSuccess;
    }
  }
  return Start(url, key);
}

}  // namespace mslite_triton
