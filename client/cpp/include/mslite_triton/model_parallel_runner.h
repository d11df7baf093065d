// MindSpore Lite's mindspore::RunnerConfig and mindspore::ModelParallelRunner
// (include/api/model_parallel_runner.h), served by mslite-triton over KServe v2 HTTP.
#ifndef MSLITE_TRITON_MODEL_PARALLEL_RUNNER_H_
#define MSLITE_TRITON_MODEL_PARALLEL_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mslite_triton/context.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace mslite_triton {

// Workers, context, config sections and device ids of one runner. Config sections go to the server as
// `section.key` backend parameters, except two read here: [dynamic_batching] (Triton's batcher) and the
// client's own [runner]: max_pending_predicts (how many predicts of this runner may be in flight; more are
// refused at once with kLiteServiceDeny; default 1000, MindSpore Lite's task-queue bound; 0: no bound), and
// a tuned config.ini's workers_num and thread_num (used where SetWorkersNum / Context::SetThreadNum set none).
class RunnerConfig {
 public:
  RunnerConfig() = default;

  void SetWorkersNum(int32_t workers_num) { workers_num_ = workers_num; }
  int32_t GetWorkersNum() const { return workers_num_; }
  void SetContext(const std::shared_ptr<Context> &context) {
    if (context != nullptr) context_ = context;  // a null context is ignored, as MindSpore Lite's
  }
  std::shared_ptr<Context> GetContext() const { return context_; }
  // Replaces the whole section.
  void SetConfigInfo(const std::string &section, const std::map<std::string, std::string> &config) {
    config_info_[section] = config;
  }
  std::map<std::string, std::map<std::string, std::string>> GetConfigInfo() const { return config_info_; }
  // A MindSpore Lite config file ([section] lines, key=value lines, # comments), read at Init; keys given by
  // SetConfigInfo win over the file's.
  void SetConfigPath(const std::string &config_path) { config_path_ = config_path; }
  std::string GetConfigPath() const { return config_path_; }
  // GPU workers go round these devices (default: the GPUDeviceInfo's id).
  void SetDeviceIds(const std::vector<uint32_t> &device_ids) { device_ids_ = device_ids; }
  std::vector<uint32_t> GetDeviceIds() const { return device_ids_; }

 private:
  int32_t workers_num_ = 0;  // 0: MindSpore Lite's default rule, applied at upload
  std::shared_ptr<Context> context_;
  std::map<std::string, std::map<std::string, std::string>> config_info_;
  std::string config_path_;
  std::vector<uint32_t> device_ids_;
};

// The runner. Init uploads a local ONNX or MindIR file (one instance per worker; the same file and config
// reuse the model already loaded, sending the admin key from MSLITE_TRITON_KEY or the key file `serve`
// wrote) or binds to `triton://NAME`, a model in the server's repository. Predict is thread-safe: each
// call is one HTTP request on a pooled connection. No call throws; failures come back as a Status.
class ModelParallelRunner {
 public:
  ModelParallelRunner();
  ~ModelParallelRunner();  // waits for predicts in flight; the model stays loaded for other clients
  ModelParallelRunner(const ModelParallelRunner &) = delete;
  ModelParallelRunner &operator=(const ModelParallelRunner &) = delete;

  Status Init(const std::string &model_path, const std::shared_ptr<RunnerConfig> &runner_config = nullptr);
  // The same from a model in memory (ONNX or MindIR bytes); its server-side name starts with "model_".
  Status Init(const void *model_data, size_t data_size, const std::shared_ptr<RunnerConfig> &runner_config = nullptr);
  // Fresh tensors (name, type, shape, no data) on every call; a dynamic batch dim reads 1.
  std::vector<MSTensor> GetInputs();
  std::vector<MSTensor> GetOutputs();
  // An empty *outputs gets new tensors; a full one (one per model output) is filled in place, into each
  // tensor's own buffer when it is large enough. Kernel callbacks are refused (kLiteNotSupport).
  Status Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                 const MSKernelCallBack &before = nullptr, const MSKernelCallBack &after = nullptr);

  // This library's own: the server-side model name ("" before Init), and predicts now in flight.
  std::string GetModelName() const;
  int GetPendingPredicts() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::ModelParallelRunner;
using mslite_triton::RunnerConfig;
}  // namespace mindspore

#endif  // MSLITE_TRITON_MODEL_PARALLEL_RUNNER_H_
