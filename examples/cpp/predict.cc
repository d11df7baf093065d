// ModelParallelRunner::Predict's C++ face over the KServe v2 HTTP protocol (MindSpore Lite's C++ concurrent-inference guide), with libcurl only.
//
// Sends a float32 input (input.bin: N x 3 x 224 x 224 for MobileNetV2) to a Triton server as KServe v2 binary
// tensor data, from several threads at once (each its own curl handle: the server's workers run them in
// parallel), and prints each output's name, shape, element count and first values.
//
//   make cpp-example     # g++ -O2 -std=c++17 -o examples/cpp/build/predict examples/cpp/predict.cc -lcurl -pthread
//                        # (Debian: apt-get install g++ libcurl4-openssl-dev)
//   examples/cpp/build/predict http://127.0.0.1:8000 mobilenetv2 examples/model/input.bin [--threads 5]
//                        [--input-name input] [--dump out.bin]
//
// Exit status 0 when every request succeeded. Inference needs no admin key (only model control does).
#include <curl/curl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr long kImageFloats = 3L * 224 * 224;

struct Reply {
  long status = 0;
  std::string body;
  size_t header_length = 0;  // Inference-Header-Content-Length: the JSON part of a binary reply
};

size_t OnBody(char *data, size_t size, size_t n, void *user) {
  static_cast<Reply *>(user)->body.append(data, size * n);
  return size * n;
}

size_t OnHeader(char *data, size_t size, size_t n, void *user) {
  static const char kName[] = "inference-header-content-length:";
  std::string line(data, size * n);
  if (line.size() > sizeof(kName) - 1 && strncasecmp(line.c_str(), kName, sizeof(kName) - 1) == 0) {
    static_cast<Reply *>(user)->header_length = std::strtoul(line.c_str() + sizeof(kName) - 1, nullptr, 10);
  }
  return size * n;
}

// One KServe v2 infer request: JSON header, then the input's raw bytes; every output comes back binary.
bool Predict(const std::string &url, const std::string &model, const std::string &input_name,
             const std::vector<char> &input, Reply *reply, std::string *error) {
  long batch = static_cast<long>(input.size() / (kImageFloats * sizeof(float)));
  std::ostringstream header;
  header << R"({"inputs":[{"name":")" << input_name << R"(","shape":[)" << batch
         << R"(,3,224,224],"datatype":"FP32","parameters":{"binary_data_size":)" << input.size()
         << R"(}}],"parameters":{"binary_data_output":true}})";
  std::string body = header.str();
  std::string length_header = "Inference-Header-Content-Length: " + std::to_string(body.size());
  body.append(input.data(), input.size());

  CURL *curl = curl_easy_init();
  if (curl == nullptr) {
    *error = "curl_easy_init failed";
    return false;
  }
  curl_slist *headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
  headers = curl_slist_append(headers, length_header.c_str());
  std::string endpoint = url + "/v2/models/" + model + "/infer";
  curl_easy_setopt(curl, CURLOPT_URL, endpoint.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, reply);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, reply);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 120L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based timeouts
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply->status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    *error = std::string("cannot reach ") + endpoint + ": " + curl_easy_strerror(rc);
    return false;
  }
  if (reply->status != 200) {
    bool full = reply->status == 503 && reply->body.find("maximum queue size") != std::string::npos;
    *error = std::string(full ? "kLiteServiceDeny: " : "kLiteError: ") + "HTTP " + std::to_string(reply->status) +
             " " + reply->body;
    return false;
  }
  return true;
}

// The value after `"key":` in the JSON header, from `from` on (enough for the one-output reply read here).
std::string Field(const std::string &json, const std::string &key, size_t from = 0) {
  size_t at = json.find("\"" + key + "\":", from);
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  if (at >= json.size()) return "";
  char open = json[at];
  size_t end = open == '[' ? json.find(']', at) : open == '"' ? json.find('"', at + 1) : json.find_first_of(",}", at);
  if (end == std::string::npos) return "";
  if (open == '"') return json.substr(at + 1, end - at - 1);
  return json.substr(at, end - at + (open == '[' ? 1 : 0));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0]
              << " URL MODEL INPUT_BIN [--threads N] [--input-name NAME] [--dump OUT_BIN]\n";
    return 2;
  }
  std::string url = argv[1], model = argv[2], input_path = argv[3], input_name = "input", dump;
  int threads = 1;
  for (int i = 4; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--input-name") input_name = argv[i + 1];
    else if (flag == "--dump") dump = argv[i + 1];
  }
  std::ifstream in(input_path, std::ios::binary);
  std::vector<char> input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (input.empty() || input.size() % (kImageFloats * sizeof(float)) != 0) {
    std::cerr << "input '" << input_path << "' must hold N x 3 x 224 x 224 float32 values\n";
    return 1;
  }

  curl_global_init(CURL_GLOBAL_DEFAULT);  // once, before any thread
  std::mutex print;
  int failed = 0;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Reply reply;
      std::string error;
      bool ok = Predict(url, model, input_name, input, &reply, &error);
      std::lock_guard<std::mutex> lock(print);
      if (!ok) {
        std::cerr << "thread " << t << ": predict failed: " << error << "\n";
        ++failed;
        return;
      }
      const std::string json = reply.body.substr(0, reply.header_length);
      size_t outputs = json.find("\"outputs\"");
      size_t bytes = std::strtoul(Field(json, "binary_data_size", outputs).c_str(), nullptr, 10);
      if (reply.header_length == 0 || reply.header_length + bytes > reply.body.size()) {
        std::cerr << "thread " << t << ": unexpected reply: " << reply.body.substr(0, 300) << "\n";
        ++failed;
        return;
      }
      const char *data = reply.body.data() + reply.header_length;
      std::vector<float> values(bytes / sizeof(float));
      std::memcpy(values.data(), data, values.size() * sizeof(float));
      std::cout << "thread " << t << ": tensor name is:" << Field(json, "name", outputs)
                << " shape:" << Field(json, "shape", outputs) << " tensor elements num is:" << values.size()
                << "\noutput data is:";
      for (size_t i = 0; i < values.size() && i < 5; ++i) std::cout << " " << values[i];
      std::cout << "\n";
      if (t == 0 && !dump.empty()) {
        std::ofstream(dump, std::ios::binary).write(data, static_cast<std::streamsize>(bytes));
      }
    });
  }
  for (auto &w : workers) w.join();
  curl_global_cleanup();
  std::cout << "requests: " << threads << ", failed: " << failed << "\n";
  return failed == 0 ? 0 : 1;
}
