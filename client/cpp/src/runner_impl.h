// The runner's work behind ModelParallelRunner and Model (a Model is a runner of one worker). Not installed.
#ifndef MSLITE_TRITON_SRC_RUNNER_IMPL_H_
#define MSLITE_TRITON_SRC_RUNNER_IMPL_H_

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kserve_http.h"
#include "mslite_triton/model_parallel_runner.h"
#include "protocol.h"

namespace mslite_triton {

struct TensorSpec {
  std::string name;
  enum DataType type;
  std::vector<int64_t> shape;
};

class ModelParallelRunner::Impl {
 public:
  mutable std::shared_mutex lock;  // Start and the destructor write; Predict and the getters share it
  std::unique_ptr<KServeHttp> http;
  std::string model;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<std::string> output_names;
  int max_pending = protocol::DEFAULT_MAX_PENDING;  // 0: no bound
  std::atomic<int> pending{0};

  // Init's work: `model_path` is triton://NAME or a file's path (its label when `model_bytes`, the model
  // itself, is given). `what` names the call in messages ("ModelParallelRunner's init").
  Status Start(const std::string &model_path, const std::string *model_bytes,
               const std::shared_ptr<RunnerConfig> &runner_config, const char *what);
  // One request; `*outputs` empty (new tensors) or one per model output (filled in place). Kernel callbacks
  // are refused: the server runs the graph.
  Status Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                 const MSKernelCallBack &before = nullptr, const MSKernelCallBack &after = nullptr);
  // Fresh tensors (name, type, shape, no data) of the model's inputs or outputs.
  std::vector<MSTensor> Tensors(bool in) const;
};

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_RUNNER_IMPL_H_
