// The runner's work behind ModelParallelRunner and Model (a Model is a runner of one worker). Not installed.
#ifndef MSLITE_TRITON_SRC_RUNNER_IMPL_H_
#define MSLITE_TRITON_SRC_RUNNER_IMPL_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kserve_http.h"
#include "model_configs.h"
#include "mslite_triton/model_parallel_runner.h"
#include "protocol.h"

namespace mslite_triton {

struct TensorSpec {
  std::string name;
  enum DataType type;
  std::vector<int64_t> shape;     // as GetInputs shows it: a dynamic batch dim reads 1
  std::vector<int64_t> declared;  // as the server declares it: -1 where dynamic
};

// MindSpore Lite resizes any model. The inputs given `shapes` (one per model input, in order) that differ from
// the model in a dim it fixes, as "name:dim,dim;..." ("" when none does: the served model takes them as they are).
// Such shapes are served by the model built again with RESIZED_INPUTS_PARAMETER (the server's rule).
std::string FixedDimsChanged(const std::vector<TensorSpec> &inputs, const std::vector<std::vector<int64_t>> &shapes);

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
  // What Start uploaded, to build the model again with resized inputs: the path (or the label of `bytes`,
  // a buffer's model), the config and its sections. An empty source: bound with triton://, not rebuilt.
  std::string source;
  std::shared_ptr<const std::string> bytes;
  RunnerConfig config;
  Sections sections;
  std::mutex resize_lock;                      // one rebuild at a time; predicts of other shapes go on
  std::map<std::string, std::string> resized;  // FixedDimsChanged's key -> the server model serving it

  // Init's work: `model_path` is triton://NAME or a file's path (its label when `model_bytes`, the model
  // itself, is given). `what` names the call in messages ("ModelParallelRunner's init").
  Status Start(const std::string &model_path, const std::string *model_bytes,
               const std::shared_ptr<RunnerConfig> &runner_config, const char *what);
  // The model built again with `shapes` (one per input, in order) in the dims it fixes, under its own name
  // (the one built before keeps serving): its name and tensors. kLiteNotSupport for a model bound with
  // triton://; the server's reason when the graph cannot run the shapes. `declared`: the inputs now served.
  Status Rebuild(const std::vector<TensorSpec> &declared, const std::vector<std::vector<int64_t>> &shapes,
                 std::string *name, std::vector<TensorSpec> *ins, std::vector<TensorSpec> *outs);
  // Model::Resize's switch to the rebuilt model.
  void Adopt(const std::string &name, std::vector<TensorSpec> ins, std::vector<TensorSpec> outs);
  // One request; `*outputs` empty (new tensors) or one per model output (filled in place). Kernel callbacks
  // are refused: the server runs the graph.
  // With `rebuild` (the runner's, as MindSpore Lite's workers resize), shapes in dims the model fixes are
  // served by the model built again for them (once per set of such dims); without (a Model's), the server
  // refuses them.
  Status Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                 const MSKernelCallBack &before = nullptr, const MSKernelCallBack &after = nullptr,
                 bool rebuild = true);
  // Fresh tensors (name, type, shape, no data) of the model's inputs or outputs.
  std::vector<MSTensor> Tensors(bool in) const;
};

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_RUNNER_IMPL_H_
