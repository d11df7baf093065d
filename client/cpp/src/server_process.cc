#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

// One `mslite-triton serve --private` child and what it said (mslite_contract/own_server.py: what such a server
// is). It stops once its standard input ends: this process holds the pipe's only writing end (close-on-exec, so
// no program it runs inherits it), which the kernel closes when this process ends, however it ends and
// whichever thread started the server. The child removes every folder it made; this side makes none (the
// child's error output goes to an anonymous file, read back only to say why a start failed).
struct Child {
  std::mutex mutex;
  std::condition_variable changed;
  pid_t pid = -1;
  std::string url;
  std::string key;
  bool serving = false;
  bool exited = false;
  std::string failure;  // why it stopped, for a start that failed
  int input = -1;       // the writing end of its standard input; closed to stop it
  int log = -1;         // its error output (an anonymous file)
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

// The command that runs mslite-triton (the rule of mslite_contract/own_server.py): SERVE_CMD_ENV's words, else
// SERVE_PROGRAM on PATH, else in CHECKOUT_VENV_BIN of the current folder or one above it; empty when none.
std::vector<std::string> FindServeCommand() {
  std::vector<std::string> words;
  std::stringstream named(Getenv(protocol::SERVE_CMD_ENV));
  for (std::string word; named >> word;) words.push_back(word);
  if (!words.empty()) return words;
  std::string found = Which(protocol::SERVE_PROGRAM);
  std::error_code error;
  for (std::filesystem::path dir = std::filesystem::current_path(error); found.empty() && !error && !dir.empty();
       dir = dir.parent_path()) {
    const std::filesystem::path candidate = dir / protocol::CHECKOUT_VENV_BIN / protocol::SERVE_PROGRAM;
    if (access(candidate.c_str(), X_OK) == 0) found = candidate.string();
    if (dir == dir.root_path()) break;
  }
  if (!found.empty()) words.push_back(found);
  return words;
}

// An unnamed file for the child's error output: O_TMPFILE, else a named one removed at once.
int AnonymousFile() {
  const std::string dir = Getenv("TMPDIR").empty() ? "/tmp" : Getenv("TMPDIR");
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/mslite-triton-serve-XXXXXX";
  fd = mkostemp(&name[0], O_CLOEXEC);
  if (fd >= 0) unlink(name.c_str());
  return fd;
}

// The last non-empty line of what `fd` holds.
std::string LastLine(int fd) {
  std::string all;
  char buffer[4096];
  for (off_t at = 0;;) {
    const ssize_t n = pread(fd, buffer, sizeof buffer, at);
    if (n <= 0) break;
    all.append(buffer, static_cast<size_t>(n));
    at += n;
    if (all.size() > (1u << 20)) all.erase(0, all.size() - (1u << 16));
  }
  std::stringstream in(all);
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
void Watch(Child *child, std::vector<std::string> args, int out_read, int out_write, int in_read) {
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
  const int log_fd = child->log;
  const pid_t pid = fork();
  if (pid == 0) {  // async-signal-safe calls only until exec: this process has other threads
    dup2(in_read, 0);  // dup2 clears close-on-exec on the copies
    dup2(out_write, 1);
    dup2(log_fd, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(out_write);
  close(in_read);
  {
    std::lock_guard<std::mutex> lock(child->mutex);
    child->pid = pid;
    if (pid < 0) {
      child->exited = true;
      child->failure = std::string("fork failed: ") + std::strerror(fork_errno);
      for (int *fd : {&child->log, &child->input}) {
        close(*fd);
        *fd = -1;
      }
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
      const std::string http = protocol::HTTP_LINE, key = protocol::KEY_LINE;
      if (line.rfind(http, 0) == 0) child->url = Trim(line.substr(http.size()));
      if (line.rfind(key, 0) == 0) {
        const std::string rest = Trim(line.substr(key.size()));
        child->key = rest.substr(0, rest.find(' '));
      }
      if (line.rfind(protocol::SERVING_LINE, 0) == 0) serving = child->serving = !child->url.empty();
    }
    child->changed.notify_all();
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(out_read);
  const std::string why = LastLine(log_fd);
  {
    std::lock_guard<std::mutex> lock(child->mutex);
    close(log_fd);
    child->log = -1;
    if (child->input >= 0) close(child->input);
    child->input = -1;
    child->exited = true;
    child->serving = false;
    child->failure = Describe(status) + (why.empty() ? "" : ": " + why);
  }
  child->changed.notify_all();
}

// At exit: the end of its input and SIGTERM to the server this process started, and wait (bounded) until it has
// stopped.
void StopAtExit() {
  Child *child = g_child.load();
  if (child == nullptr) return;
  std::unique_lock<std::mutex> lock(child->mutex);
  if (child->exited || child->pid <= 0) return;
  if (child->input >= 0) close(child->input);  // the child stops at the end of its input
  child->input = -1;
  kill(child->pid, SIGTERM);
  if (!child->changed.wait_for(lock, kStopTimeout, [child] { return child->exited; })) {
    kill(child->pid, SIGKILL);
    child->changed.wait_for(lock, std::chrono::seconds(10), [child] { return child->exited; });
  }
}

Status Start(std::string *url, std::string *key) {
  const std::vector<std::string> words = FindServeCommand();
  const std::string program = words.empty() ? "" : Which(words[0]);
  if (program.empty()) {
    const std::string what = Getenv(protocol::SERVE_CMD_ENV).empty()
                                 ? std::string("'") + protocol::SERVE_PROGRAM +
                                       "', the command that starts a server, was not found (not on PATH, nor in " +
                                       protocol::CHECKOUT_VENV_BIN + "/ of the current folder or one above it)"
                                 : "'" + words[0] + "' is not installed (" + protocol::SERVE_CMD_ENV + " names it)";
    return Status(kLiteError, "cannot start a server: " + what +
                                  ": install the mslite-triton package with its server extra, name its command in " +
                                  protocol::SERVE_CMD_ENV + " (e.g. " + protocol::SERVE_CMD_ENV +
                                  "=/path/to/.venv/bin/" + protocol::SERVE_PROGRAM + "), or give a running server's "
                                  "URL in " + protocol::URL_ENV + " (or Context::SetServerUrl)");
  }
  int out[2] = {-1, -1};
  int in[2] = {-1, -1};
  const int log_fd = AnonymousFile();
  if (log_fd < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) {
    const int error = errno;
    for (int fd : {log_fd, out[0], out[1], in[0], in[1]}) {
      if (fd >= 0) close(fd);
    }
    return Status(kLiteError, "cannot start a server: " + std::string(std::strerror(error)));
  }
  std::vector<std::string> args{program};
  args.insert(args.end(), words.begin() + 1, words.end());
  for (const char *a : protocol::PRIVATE_ARGS) args.push_back(a);

  auto *child = new Child;
  child->input = in[1];
  child->log = log_fd;
  g_child.store(child);
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(StopAtExit); });
  std::thread(Watch, child, std::move(args), out[0], out[1], in[0]).detach();

  std::unique_lock<std::mutex> lock(child->mutex);
  if (!child->changed.wait_for(lock, kStartTimeout, [child] { return child->serving || child->exited; })) {
    if (child->pid > 0) kill(child->pid, SIGTERM);
    return Status(kLiteError, "the server '" + program + " serve' did not start within " +
                                  std::to_string(kStartTimeout.count()) + " s");
  }
  if (!child->serving) {
    return Status(kLiteError, "the server '" + program + " serve' did not start: " + child->failure);
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
