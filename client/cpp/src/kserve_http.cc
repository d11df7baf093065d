#include "kserve_http.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "encoding.h"
#include "endpoint.h"
#include "protocol.h"
#include "server_errors.h"

namespace mslite_triton {
namespace {

constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

struct TypeName {
  enum DataType type;
  const char *kserve;
};
constexpr TypeName kTypes[] = {
    {DataType::kNumberTypeBool, "BOOL"},     {DataType::kNumberTypeInt8, "INT8"},
    {DataType::kNumberTypeInt16, "INT16"},   {DataType::kNumberTypeInt32, "INT32"},
    {DataType::kNumberTypeInt64, "INT64"},   {DataType::kNumberTypeUInt8, "UINT8"},
    {DataType::kNumberTypeUInt16, "UINT16"}, {DataType::kNumberTypeUInt32, "UINT32"},
    {DataType::kNumberTypeUInt64, "UINT64"}, {DataType::kNumberTypeFloat16, "FP16"},
    {DataType::kNumberTypeFloat32, "FP32"},  {DataType::kNumberTypeFloat64, "FP64"},
};

std::once_flag curl_initialised;

size_t OnBody(char *data, size_t size, size_t n, void *user) {
  static_cast<std::string *>(user)->append(data, size * n);
  return size * n;
}

// Large enough for MobileNetV2's 600 KB input in one piece: fewer read callbacks and send() calls.
constexpr long kUploadBufferBytes = 1L << 20;

size_t OnHeader(char *data, size_t size, size_t n, void *user) {
  constexpr size_t kName = sizeof(kHeaderLength) - 1;
  if (size * n > kName + 1 && strncasecmp(data, kHeaderLength, kName) == 0 && data[kName] == ':') {
    *static_cast<long *>(user) = std::strtol(std::string(data + kName + 1, size * n - kName - 1).c_str(), nullptr, 10);
  }
  return size * n;
}

}  // namespace

// curl's read callback: the next bytes of the body, straight from the caller's tensors.
size_t ReadBody(char *buffer, size_t size, size_t n, void *user);

struct KServeHttp::Connection {
  CURL *curl = nullptr;
  std::vector<Piece> pieces;  // the body being sent; reused, so no allocation per request
  size_t piece = 0;            // where the read callback is in `pieces`
  size_t offset = 0;
  std::string reply;
  long status = 0;
  long header_length = -1;  // the JSON part of a binary answer; -1 when the answer is all JSON

  ~Connection() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

size_t ReadBody(char *buffer, size_t size, size_t n, void *user) {
  auto *c = static_cast<KServeHttp::Connection *>(user);
  size_t room = size * n, written = 0;
  while (written < room && c->piece < c->pieces.size()) {
    const KServeHttp::Piece &p = c->pieces[c->piece];
    size_t take = std::min(room - written, p.size - c->offset);
    std::memcpy(buffer + written, p.data + c->offset, take);
    written += take;
    c->offset += take;
    if (c->offset == p.size) {
      ++c->piece;
      c->offset = 0;
    }
  }
  return written;
}

const char *KServeName(enum DataType type) {
  for (const auto &t : kTypes) {
    if (t.type == type) return t.kserve;
  }
  return nullptr;
}

enum DataType FromKServe(const std::string &name) {
  for (const auto &t : kTypes) {
    if (name == t.kserve) return t.type;
  }
  return DataType::kTypeUnknown;
}

Status KServeHttp::Create(const std::string &url, const std::string &key, std::unique_ptr<KServeHttp> *out) {
  std::string scheme, host;
  int port = -1;
  if (!SplitUrl(url, &scheme, &host, &port)) {
    return Status(kLiteParamInvalid,
                  "server url must look like http://host:port (this client speaks KServe v2 over HTTP), got '" + url +
                      "'");
  }
  std::call_once(curl_initialised, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });  // once, before any handle
  std::string base = url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  out->reset(new KServeHttp(base, key));
  return kSuccess;
}

KServeHttp::KServeHttp(std::string base, std::string key) : base_(std::move(base)), key_(std::move(key)) {}

KServeHttp::~KServeHttp() = default;

std::unique_ptr<KServeHttp::Connection> KServeHttp::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<Connection>();
  c->curl = curl_easy_init();
  if (c->curl == nullptr) return nullptr;
  curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);  // many threads: no SIGALRM-based timeouts
  curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, 120L);
  curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &c->reply);
  curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, &c->header_length);
  curl_easy_setopt(c->curl, CURLOPT_READFUNCTION, ReadBody);
  curl_easy_setopt(c->curl, CURLOPT_READDATA, c.get());
  curl_easy_setopt(c->curl, CURLOPT_UPLOAD_BUFFERSIZE, kUploadBufferBytes);
  return c;
}

void KServeHttp::Release(std::unique_ptr<Connection> connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(connection));
}

Status KServeHttp::Send(Connection *c, const std::string &path, const std::vector<Piece> *body,
                        const char *content_type, long header_length) {
  c->reply.clear();
  c->status = 0;
  c->header_length = -1;
  const std::string url = base_ + path;
  curl_slist *headers = curl_slist_append(nullptr, "Expect:");  // no 100-continue round trip before a large body
  if (content_type != nullptr) {
    headers = curl_slist_append(headers, (std::string("Content-Type: ") + content_type).c_str());
  }
  if (header_length >= 0) {
    headers = curl_slist_append(headers, (std::string(kHeaderLength) + ": " + std::to_string(header_length)).c_str());
  }
  if (!key_.empty()) {
    headers = curl_slist_append(headers, (std::string(protocol::ADMIN_KEY_HEADER) + ": " + key_).c_str());
  }
  curl_easy_setopt(c->curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
  if (body != nullptr) {
    c->pieces = *body;
    c->piece = 0;
    c->offset = 0;
    curl_off_t total = 0;
    for (const Piece &p : *body) total += static_cast<curl_off_t>(p.size);
    curl_easy_setopt(c->curl, CURLOPT_POST, 1L);  // the body comes from ReadBody, its length known up front
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, total);
  } else {
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
  }
  CURLcode rc = curl_easy_perform(c->curl);
  curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  c->pieces.clear();  // the caller's buffers are not ours to keep pointing at
  if (rc != CURLE_OK) {
    return Status(kLiteError, "cannot reach the server at " + base_ + ": " + curl_easy_strerror(rc));
  }
  curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
  return kSuccess;
}

Status KServeHttp::Get(const std::string &path, const char *what, json::Value *out) {
  std::unique_ptr<Connection> c = Acquire();
  if (c == nullptr) return Status(kLiteMemoryFailed, "curl_easy_init failed");
  Status s = Send(c.get(), path, nullptr, nullptr, -1);
  if (s.IsOk() && c->status != 200) s = Classify(c->status, c->reply, kLiteError);
  std::string error;
  if (s.IsOk() && !json::Parse(c->reply.data(), c->reply.size(), out, &error)) {
    s = Status(kLiteError, std::string("the server's ") + what + " is not JSON: " + error);
  }
  Release(std::move(c));
  return s;
}

Status KServeHttp::Live() {
  std::unique_ptr<Connection> c = Acquire();
  if (c == nullptr) return Status(kLiteMemoryFailed, "curl_easy_init failed");
  Status s = Send(c.get(), "/v2/health/live", nullptr, nullptr, -1);
  if (s.IsOk() && c->status != 200) {
    s = Status(kLiteError, "the server at " + base_ + " is not live (HTTP " + std::to_string(c->status) + ")");
  }
  Release(std::move(c));
  return s;
}

Status KServeHttp::ModelReady(const std::string &model, bool *ready) {
  std::unique_ptr<Connection> c = Acquire();
  if (c == nullptr) return Status(kLiteMemoryFailed, "curl_easy_init failed");
  Status s = Send(c.get(), "/v2/models/" + Encode(model) + "/ready", nullptr, nullptr, -1);
  *ready = s.IsOk() && c->status == 200;
  Release(std::move(c));
  return s;
}

Status KServeHttp::Metadata(const std::string &model, json::Value *out) {
  return Get("/v2/models/" + Encode(model), "model metadata", out);
}

Status KServeHttp::Config(const std::string &model, json::Value *out) {
  return Get("/v2/models/" + Encode(model) + "/config", "model config", out);
}

Status KServeHttp::Load(const std::string &model, const std::string &config_json, const std::string &file_name,
                        const std::string &bytes) {
  std::string body = R"({"parameters":{"config":)" + json::Quote(config_json) + "," + json::Quote(file_name) + ":\"" +
                     Base64(bytes) + "\"}}";
  std::unique_ptr<Connection> c = Acquire();
  if (c == nullptr) return Status(kLiteMemoryFailed, "curl_easy_init failed");
  const std::vector<Piece> pieces = {{body.data(), body.size()}};
  Status s = Send(c.get(), "/v2/repository/models/" + Encode(model) + "/load", &pieces, "application/json", -1);
  if (s.IsOk() && c->status != 200) s = Classify(c->status, c->reply, kLiteGraphFileError);
  Release(std::move(c));
  return s;
}

Status KServeHttp::Infer(const std::string &model, const std::vector<std::string> &names,
                         const std::vector<MSTensor> &inputs, const std::vector<std::string> &outputs,
                         std::string *body, std::vector<OutputView> *views) {
  std::string head = R"({"inputs":[)";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const MSTensor &t = inputs[i];
    const char *type = KServeName(t.DataType());
    if (type == nullptr) {
      return Status(kLiteNotSupport, "input '" + names[i] + "' has data type " +
                                         std::to_string(static_cast<int>(t.DataType())) +
                                         ", which the server does not take");
    }
    head += i == 0 ? "{\"name\":" : ",{\"name\":";
    head += json::Quote(names[i]) + ",\"shape\":[";
    for (size_t d = 0; d < t.Shape().size(); ++d) head += (d == 0 ? "" : ",") + std::to_string(t.Shape()[d]);
    head += std::string(R"(],"datatype":")") + type + R"(","parameters":{"binary_data_size":)" +
            std::to_string(t.DataSize()) + "}}";
  }
  head += R"(],"outputs":[)";
  for (size_t i = 0; i < outputs.size(); ++i) {
    head += (i == 0 ? "{\"name\":" : ",{\"name\":") + json::Quote(outputs[i]) +
            R"(,"parameters":{"binary_data":true}})";
  }
  head += "]}";

  std::unique_ptr<Connection> c = Acquire();
  if (c == nullptr) return Status(kLiteMemoryFailed, "curl_easy_init failed");
  std::vector<Piece> pieces = {{head.data(), head.size()}};  // the tensors are sent from where they are
  for (const MSTensor &t : inputs) pieces.push_back({static_cast<const char *>(t.Data().get()), t.DataSize()});
  Status s = Send(c.get(), "/v2/models/" + Encode(model) + "/infer", &pieces, "application/octet-stream",
                  static_cast<long>(head.size()));
  if (s.IsOk() && c->status != 200) s = Classify(c->status, c->reply, kLiteError);
  long json_length = c->header_length;
  body->swap(c->reply);
  Release(std::move(c));
  if (s.IsError()) return s;

  size_t header = json_length < 0 ? body->size() : static_cast<size_t>(json_length);
  json::Value answer;
  std::string error;
  if (header > body->size() || !json::Parse(body->data(), header, &answer, &error)) {
    return Status(kLiteError, "the server's answer is not KServe v2 JSON: " + error);
  }
  views->clear();
  const json::Value *outs = answer.Find("outputs");
  size_t offset = header;
  for (const json::Value &o : outs == nullptr ? std::vector<json::Value>() : outs->items) {
    OutputView view;
    const json::Value *name = o.Find("name");
    const json::Value *type = o.Find("datatype");
    const json::Value *shape = o.Find("shape");
    const json::Value *params = o.Find("parameters");
    const json::Value *size = params == nullptr ? nullptr : params->Find("binary_data_size");
    view.name = name == nullptr ? "" : name->text;
    view.type = FromKServe(type == nullptr ? "" : type->text);
    if (view.type == DataType::kTypeUnknown) {
      return Status(kLiteNotSupport, "output '" + view.name + "' has datatype " + (type ? type->text : "?") +
                                         ", which this client does not read");
    }
    for (const json::Value &d : shape == nullptr ? std::vector<json::Value>() : shape->items) {
      view.shape.push_back(d.AsInt(-1));
    }
    if (size == nullptr || size->AsInt(-1) < 0 || offset + static_cast<size_t>(size->AsInt(0)) > body->size()) {
      return Status(kLiteError, "output '" + view.name + "' came back without its binary data");
    }
    view.offset = offset;
    view.size = static_cast<size_t>(size->AsInt(0));
    offset += view.size;
    views->push_back(std::move(view));
  }
  return kSuccess;
}

}  // namespace mslite_triton
