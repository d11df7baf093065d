// The KServe v2 HTTP/REST protocol over libcurl: the only part of the library that talks to the server.
// Connections are pooled (a curl handle keeps its connection alive between requests) and every method may
// be called from many threads at once. Server errors become Status codes in one place (Classify).
#ifndef MSLITE_TRITON_SRC_KSERVE_HTTP_H_
#define MSLITE_TRITON_SRC_KSERVE_HTTP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "json.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace mslite_triton {

// One output of an infer answer: where its bytes lie in the answer's body.
struct OutputView {
  std::string name;
  enum DataType type = DataType::kTypeUnknown;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t size = 0;
};

class KServeHttp {
 public:
  struct Connection;  // a curl handle and its reusable buffers
  struct Piece {      // one piece of a request body, sent from where it lies
    const char *data;
    size_t size;
  };

  // kLiteParamInvalid unless `url` looks like http(s)://host:port. `key`: the admin key ("" for none).
  static Status Create(const std::string &url, const std::string &key, std::unique_ptr<KServeHttp> *out);
  ~KServeHttp();
  KServeHttp(const KServeHttp &) = delete;
  KServeHttp &operator=(const KServeHttp &) = delete;

  const std::string &url() const { return base_; }
  Status Live();
  Status ModelReady(const std::string &model, bool *ready);
  Status Metadata(const std::string &model, json::Value *out);
  Status Config(const std::string &model, json::Value *out);
  // Uploads a model's file and config through Triton's load API (the file base64 in the JSON body).
  Status Load(const std::string &model, const std::string &config_json, const std::string &file_name,
              const std::string &bytes);

  // One request: inputs as binary tensor data under `names`, the `outputs` asked for as binary data. On
  // success `body` holds the answer and `views` where each output lies in it.
  Status Infer(const std::string &model, const std::vector<std::string> &names, const std::vector<MSTensor> &inputs,
               const std::vector<std::string> &outputs, std::string *body, std::vector<OutputView> *views);

 private:
  KServeHttp(std::string base, std::string key);
  std::unique_ptr<Connection> Acquire();
  void Release(std::unique_ptr<Connection> connection);
  // Sends one request on a pooled connection; the answer's status, body and JSON header length land in it.
  // `body`: the pieces of a POST body, sent in order without joining them (nullptr: a GET).
  Status Send(Connection *c, const std::string &path, const std::vector<Piece> *body, const char *content_type,
              long header_length);
  Status Get(const std::string &path, const char *otherwise, json::Value *out);

  const std::string base_;
  const std::string key_;  // the admin key ("" when there is none); inference needs none
  std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// KServe v2 datatype names ("FP32") of MindSpore Lite types, and back (nullptr / kTypeUnknown: none).
const char *KServeName(enum DataType type);
enum DataType FromKServe(const std::string &name);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_KSERVE_HTTP_H_
