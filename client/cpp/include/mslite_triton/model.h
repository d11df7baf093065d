// MindSpore Lite's mindspore::Model and mindspore::ModelType (include/api/model.h): one model, served by
// mslite-triton over KServe v2 HTTP as one worker.
#ifndef MSLITE_TRITON_MODEL_H_
#define MSLITE_TRITON_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <iterator>  // MindSpore Lite's headers bring it: its device sample uses std::back_inserter
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mslite_triton/context.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace mslite_triton {

// MindSpore Lite's numbers. The server tells ONNX from MindIR by the file's bytes (as the Python client
// does), so kMindIR and kONNX both take either; kMindIR_Lite (.ms) and Ascend's kAIR / kOM cannot be served.
enum ModelType : uint32_t {
  kMindIR = 0,
  kAIR = 1,
  kOM = 2,
  kONNX = 3,
  kMindIR_Lite = 4,
  kDataFlow = 5,
  kUnknownType = 0xFFFFFFFF,
};

// A model built from a file or buffer: Build uploads it (one worker, the context's threads; a MindIR is
// converted by the server; the same bytes and config reuse the model loaded already) or binds to
// `triton://NAME`. Without Context::SetServerUrl or MSLITE_TRITON_URL, the first Build starts
// `mslite-triton serve` for this process (see the docs). Copies share one model, as MindSpore Lite's.
// Calls on one model are serialized; no call throws.
class Model {
 public:
  Model();
  ~Model();

  Status Build(const void *model_data, size_t data_size, ModelType model_type,
               const std::shared_ptr<Context> &model_context = nullptr);
  Status Build(const std::string &model_path, ModelType model_type,
               const std::shared_ptr<Context> &model_context = nullptr);

  // A MindSpore Lite config file, read at Build ([section] and key=value lines; sections go to the server as
  // backend parameters, as RunnerConfig::SetConfigPath's). UpdateConfig's keys win over the file's.
  Status LoadConfig(const std::string &config_path);
  Status UpdateConfig(const std::string &section, const std::pair<std::string, std::string> &config);

  // New shapes for the inputs (the same rank); the model runs once on zeros at the new shapes, so that
  // GetOutputs() knows the output shapes. A shape the model cannot run at gets the server's reason.
  Status Resize(const std::vector<MSTensor> &inputs, const std::vector<std::vector<int64_t>> &dims);

  // Outputs: an empty *outputs gets the model's own output tensors (those GetOutputs() returns), holding
  // the results; a full one (one per model output) is filled in place, into each tensor's own buffer when it
  // is large enough. Kernel callbacks are refused (kLiteNotSupport); so are tensors on a device.
  Status Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                 const MSKernelCallBack &before = nullptr, const MSKernelCallBack &after = nullptr);
  // Runs on the tensors GetInputs() returns; the results land in those GetOutputs() returns.
  Status Predict(const MSKernelCallBack &before = nullptr, const MSKernelCallBack &after = nullptr);

  // The model's own tensors: the same ones on every call (fill the inputs through any copy).
  std::vector<MSTensor> GetInputs();
  std::vector<MSTensor> GetOutputs();
  std::vector<std::string> GetOutputTensorNames();
  // A null tensor (== nullptr) when no tensor has that name.
  MSTensor GetInputByTensorName(const std::string &tensor_name);
  MSTensor GetOutputByTensorName(const std::string &tensor_name);

  // This library's own: the server-side model name ("" before Build).
  std::string GetModelName() const;

  class Impl;

 private:
  friend struct ModelAccess;  // a ModelGroup joins its models
  std::shared_ptr<Impl> impl_;
};

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::kAIR;
using mslite_triton::kDataFlow;
using mslite_triton::kMindIR;
using mslite_triton::kMindIR_Lite;
using mslite_triton::kOM;
using mslite_triton::kONNX;
using mslite_triton::kUnknownType;
using mslite_triton::Model;
using mslite_triton::ModelType;
}  // namespace mindspore

#endif  // MSLITE_TRITON_MODEL_H_
