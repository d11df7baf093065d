#include "mslite_triton/model.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "model_configs.h"
#include "model_group_impl.h"
#include "runner_impl.h"

namespace mslite_triton {
namespace {

constexpr char kBuild[] = "Build";

Status CheckType(ModelType type) {
  switch (type) {
    case kMindIR:
    case kONNX:
    case kMindIR_Lite:  // the bytes tell: a .ms flatbuffer is refused with its reason at upload
      return kSuccess;
    case kAIR:
    case kOM:
      return Status(kLiteNotSupport, "Build failed! AIR and OM models run on Ascend only; this server runs ONNX and "
                                     "MindIR models on CPU and GPU workers");
    default:
      return Status(kLiteParamInvalid, "Build failed! model type " + std::to_string(static_cast<uint32_t>(type)) +
                                           " is none of kMindIR, kONNX, kMindIR_Lite");
  }
}

// `s` as a failure of `what` (its own "predict failed! " prefix dropped: the predict is ours, not the caller's).
Status Failed(const char *what, const Status &s) {
  std::string reason = s.GetErrDescription();
  const std::string inner = "predict failed! ";
  if (reason.compare(0, inner.size(), inner) == 0) reason.erase(0, inner.size());
  return Status(s.StatusCode(), std::string(what) + " failed! " + reason);
}

std::string Text(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d == 0 ? "" : ",") + std::to_string(shape[d]);
  return out + "]";
}

}  // namespace

class Model::Impl {
 public:
  std::recursive_mutex lock;  // calls on one model are serialized, as MindSpore Lite's
  ModelParallelRunner::Impl runner;
  std::string config_path;
  std::map<std::string, std::map<std::string, std::string>> config_info;
  std::vector<MSTensor> inputs;  // the model's own tensors, handed out by GetInputs / GetOutputs
  std::vector<MSTensor> outputs;
  std::shared_ptr<ModelGroup::Impl> group;

  // `label`: triton://NAME, or the path (`from_file`) or "model" (a buffer) that `bytes` came from.
  Status Build(const std::string &label, const std::string *bytes, const std::shared_ptr<Context> &context,
               bool from_file) {
    if (runner.http != nullptr) return Status(kLiteModelRebuild, "Build failed! the model is built already");
    auto config = std::make_shared<RunnerConfig>();
    config->SetContext(context ? context : std::make_shared<Context>());
    config->SetWorkersNum(1);  // one Model, one worker: its threads are the context's
    config->SetConfigPath(config_path);
    for (const auto &section : config_info) config->SetConfigInfo(section.first, section.second);
    const std::string shared = group && bytes ? group->Shared(*bytes) : "";
    Status s = shared.empty() ? runner.Start(label, bytes, config, kBuild)
                              : runner.Start(protocol::BIND_PREFIX + shared, nullptr, config, kBuild);
    if (s.IsError()) return s;
    if (group && bytes && shared.empty()) group->Record(*bytes, runner.model);
    // what a Resize builds again (a member sharing another's server model too): the file, read again then,
    // or a copy of the buffer
    runner.source = bytes == nullptr ? "" : label;
    runner.bytes = bytes == nullptr || from_file ? nullptr : std::make_shared<const std::string>(*bytes);
    inputs = runner.Tensors(true);
    outputs = runner.Tensors(false);
    return kSuccess;
  }

  static MSTensor Named(const std::vector<MSTensor> &tensors, const std::string &name) {
    for (const MSTensor &t : tensors) {
      if (t.Name() == name) return t;
    }
    return MSTensor(nullptr);
  }
};

void ModelAccess::Join(const Model &model, const std::shared_ptr<ModelGroup::Impl> &group) {
  std::lock_guard<std::recursive_mutex> hold(model.impl_->lock);
  model.impl_->group = group;
}

std::shared_ptr<ModelGroup::Impl> ModelAccess::Group(const Model &model) {
  std::lock_guard<std::recursive_mutex> hold(model.impl_->lock);
  return model.impl_->group;
}

Model::Model() : impl_(std::make_shared<Impl>()) {}
Model::~Model() = default;

Status Model::Build(const void *model_data, size_t data_size, ModelType model_type,
                    const std::shared_ptr<Context> &model_context) {
  try {
    std::lock_guard<std::recursive_mutex> hold(impl_->lock);
    Status s = CheckType(model_type);
    if (s.IsError()) return s;
    if (model_data == nullptr || data_size == 0) return Status(kLiteNullptr, "Build failed! the model buffer is empty");
    const std::string bytes(static_cast<const char *>(model_data), data_size);
    return impl_->Build("model", &bytes, model_context, false);
  } catch (const std::exception &e) {  // bad_alloc and the like: nothing throws across the API
    return Status(kLiteMemoryFailed, std::string("Build failed! ") + e.what());
  }
}

Status Model::Build(const std::string &model_path, ModelType model_type,
                    const std::shared_ptr<Context> &model_context) {
  try {
    std::lock_guard<std::recursive_mutex> hold(impl_->lock);
    Status s = CheckType(model_type);
    if (s.IsOk() && model_context && !model_context->MutableDeviceInfo().empty() &&
        model_context->MutableDeviceInfo().front() != nullptr) {  // before the file: say what cannot run at all
      s = CheckDevice(model_context->MutableDeviceInfo().front()->GetDeviceType());
      if (s.IsError()) s = Failed(kBuild, s);
    }
    if (s.IsError()) return s;
    const std::string prefix = protocol::BIND_PREFIX;
    if (model_path.compare(0, prefix.size(), prefix) == 0) {
      return impl_->Build(model_path, nullptr, model_context, false);
    }
    std::ifstream in(model_path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in) return Status(kLiteFileError, "Build failed! model_path does not exist or cannot be read: " + model_path);
    return impl_->Build(model_path, &bytes, model_context, true);
  } catch (const std::exception &e) {
    return Status(kLiteMemoryFailed, std::string("Build failed! ") + e.what());
  }
}

Status Model::LoadConfig(const std::string &config_path) {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  if (!std::ifstream(config_path)) {
    return Status(kLiteFileError, "LoadConfig failed! cannot read the config file '" + config_path + "'");
  }
  impl_->config_path = config_path;
  return kSuccess;
}

Status Model::UpdateConfig(const std::string &section, const std::pair<std::string, std::string> &config) {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  if (section.empty() || config.first.empty()) {
    return Status(kLiteParamInvalid, "UpdateConfig failed! the section and the key must not be empty");
  }
  impl_->config_info[section][config.first] = config.second;
  return kSuccess;
}

Status Model::Resize(const std::vector<MSTensor> &inputs, const std::vector<std::vector<int64_t>> &dims) {
  try {
    std::lock_guard<std::recursive_mutex> hold(impl_->lock);
    if (impl_->runner.http == nullptr) return Status(kLiteNullptr, "Resize failed! call Build first");
    if (inputs.size() != dims.size()) {
      return Status(kLiteParamInvalid, "Resize failed! " + std::to_string(inputs.size()) + " inputs but " +
                                           std::to_string(dims.size()) + " shapes");
    }
    std::vector<std::vector<int64_t>> shapes;
    for (const MSTensor &t : impl_->inputs) shapes.push_back(t.Shape());
    for (size_t i = 0; i < inputs.size(); ++i) {
      size_t k = 0;
      while (k < impl_->inputs.size() && impl_->inputs[k].Name() != inputs[i].Name()) ++k;
      if (k == impl_->inputs.size()) {
        return Status(kLiteParamInvalid, "Resize failed! '" + inputs[i].Name() + "' is not an input of the model");
      }
      if (dims[i].size() != shapes[k].size()) {
        return Status(kLiteInputParamInvalid, "Resize failed! input '" + inputs[i].Name() + "' has " +
                                                  std::to_string(shapes[k].size()) + " dims " + Text(shapes[k]) +
                                                  ", got " + Text(dims[i]) + ": a resize keeps the rank");
      }
      for (int64_t d : dims[i]) {
        if (d <= 0) return Status(kLiteParamInvalid, "Resize failed! dims must be positive, got " + std::to_string(d));
      }
      shapes[k] = dims[i];
    }
    std::vector<TensorSpec> served;
    {
      std::shared_lock<std::shared_mutex> read(impl_->runner.lock);
      served = impl_->runner.inputs;
    }
    if (!FixedDimsChanged(served, shapes).empty()) {
      // a dim the file fixes: the model built again with those dims resizable (another server model); the
      // one built before keeps serving this Model until that succeeds
      std::string name;
      std::vector<TensorSpec> ins, outs;
      Status s = impl_->runner.Rebuild(served, shapes, &name, &ins, &outs);
      if (s.IsError()) return Failed("Resize", s);
      impl_->runner.Adopt(name, std::move(ins), std::move(outs));
    }
    // Run once on zeros at the new shapes: the server refuses a shape the model cannot take, and the answer
    // gives the outputs' shapes, as MindSpore Lite's shape inference does.
    std::vector<MSTensor> probe;
    for (size_t k = 0; k < shapes.size(); ++k) {
      MSTensor t(impl_->inputs[k].Name(), impl_->inputs[k].DataType(), shapes[k], nullptr, 0);
      void *data = t.MutableData();
      if (data == nullptr && t.DataSize() > 0) return Status(kLiteMemoryFailed, "Resize failed! out of memory");
      if (data != nullptr) std::fill_n(static_cast<char *>(data), t.DataSize(), 0);
      probe.push_back(t);
    }
    std::vector<MSTensor> answer;
    Status s = impl_->runner.Predict(probe, &answer, nullptr, nullptr, false);
    if (s.IsError()) return Failed("Resize", s);
    for (size_t k = 0; k < shapes.size(); ++k) impl_->inputs[k].SetShape(shapes[k]);
    for (size_t i = 0; i < inputs.size(); ++i) const_cast<MSTensor &>(inputs[i]).SetShape(dims[i]);
    for (size_t o = 0; o < impl_->outputs.size() && o < answer.size(); ++o) {
      impl_->outputs[o].SetShape(answer[o].Shape());
    }
    return kSuccess;
  } catch (const std::exception &e) {
    return Status(kLiteMemoryFailed, std::string("Resize failed! ") + e.what());
  }
}

Status Model::Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                      const MSKernelCallBack &before, const MSKernelCallBack &after) {
  try {
    std::lock_guard<std::recursive_mutex> hold(impl_->lock);
    // a shape in a dim the served model fixes is refused by the server: Resize first, as in the Python client
    if (outputs == nullptr || !outputs->empty()) return impl_->runner.Predict(inputs, outputs, before, after, false);
    std::vector<MSTensor> own = impl_->outputs;  // the model's tensors, filled in place
    Status s = impl_->runner.Predict(inputs, &own, before, after, false);
    if (s.IsOk()) *outputs = own;
    return s;
  } catch (const std::exception &e) {
    return Status(kLiteMemoryFailed, std::string("predict failed! ") + e.what());
  }
}

Status Model::Predict(const MSKernelCallBack &before, const MSKernelCallBack &after) {
  std::vector<MSTensor> outputs;
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return Predict(impl_->inputs, &outputs, before, after);
}

std::vector<MSTensor> Model::GetInputs() {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return impl_->inputs;
}

std::vector<MSTensor> Model::GetOutputs() {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return impl_->outputs;
}

std::vector<std::string> Model::GetOutputTensorNames() {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  std::vector<std::string> names;
  for (const MSTensor &t : impl_->outputs) names.push_back(t.Name());
  return names;
}

MSTensor Model::GetInputByTensorName(const std::string &tensor_name) {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return Impl::Named(impl_->inputs, tensor_name);
}

MSTensor Model::GetOutputByTensorName(const std::string &tensor_name) {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return Impl::Named(impl_->outputs, tensor_name);
}

std::string Model::GetModelName() const {
  std::lock_guard<std::recursive_mutex> hold(impl_->lock);
  return impl_->runner.model;
}

}  // namespace mslite_triton
