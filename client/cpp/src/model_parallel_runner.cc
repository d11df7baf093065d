#include "mslite_triton/model_parallel_runner.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <shared_mutex>
#include <thread>

#include "json.h"
#include "model_configs.h"
#include "runner_impl.h"
#include "server_process.h"
#include "tensor_access.h"

namespace mslite_triton {
namespace {

Status Specs(const json::Value *items, bool batched, std::vector<TensorSpec> *specs) {
  specs->clear();
  for (const json::Value &t : items == nullptr ? std::vector<json::Value>() : items->items) {
    const json::Value *name = t.Find("name");
    const json::Value *type = t.Find("datatype");
    TensorSpec spec{name == nullptr ? "" : name->text, FromKServe(type == nullptr ? "" : type->text), {}, {}};
    if (spec.type == DataType::kTypeUnknown) {
      return Status(kLiteNotSupport, "tensor '" + spec.name + "' has datatype " + (type ? type->text : "?") +
                                         ", not supported here");
    }
    const json::Value *shape = t.Find("shape");
    for (const json::Value &d : shape == nullptr ? std::vector<json::Value>() : shape->items) {
      spec.shape.push_back(d.AsInt(-1));
    }
    spec.declared = spec.shape;
    if (batched && !spec.shape.empty() && spec.shape[0] == -1) spec.shape[0] = 1;  // code written for one sample runs
    specs->push_back(std::move(spec));
  }
  return kSuccess;
}

constexpr char kInit[] = "ModelParallelRunner's init";
constexpr char kDeviceMemory[] =
    "lies in device memory (SetDeviceData): this client sends host memory to the server; copy it to the host "
    "and SetData it";

Status Prefixed(const char *what, const Status &s) {
  return Status(s.StatusCode(), std::string(what) + " failed! " + s.GetErrDescription());
}

// Upload the model unless the same model and config is loaded already; the server-side name in *name.
// `label` names it in messages and gives the name's stem (the file's path, or "model" for a buffer).
// `resized`: RESIZED_INPUTS_PARAMETER's value, or "".
Status Upload(KServeHttp *http, const std::string &label, const std::string &model, const RunnerConfig &config,
              const Sections &sections, std::string *name, const std::string &resized = "") {
  // Told by content, as the Python client does: ONNX's ModelProto starts with field 1 as a varint (0x08),
  // MindIR's with a string (0x0A or 0x12; the server converts it); a .ms flatbuffer has "MSL" at offset 4.
  std::string file = "1/model.onnx";
  std::string base = label.substr(label.find_last_of('/') == std::string::npos ? 0 : label.find_last_of('/') + 1);
  if (model.size() >= 8 && model.compare(4, 3, "MSL") == 0) {
    return Status(kLiteNotSupport, "'" + base + "': MindSpore Lite's .ms format cannot be served; serve the .mindir "
                                                "(or an ONNX export) the .ms file was converted from");
  } else if (!model.empty() && (model[0] == 0x0A || model[0] == 0x12)) {
    file = "1/model.mindir";
  } else if (model.empty() || model[0] != 0x08) {
    return Status(kLiteNotSupport, "'" + base + "' is neither an ONNX nor a MindIR model");
  }
  std::string members;
  Status s = BuildModelConfig(config, sections, std::thread::hardware_concurrency(), &members, resized);
  if (s.IsError()) return s;
  *name = UploadName(label, members, model);
  bool ready = false;
  s = http->ModelReady(*name, &ready);
  if (s.IsError() || ready) return s;
  return http->Load(*name, "{" + members + ",\"name\":" + json::Quote(*name) + "}", "file:" + file, model);
}

// The served model's inputs and outputs, as its metadata and config tell them.
Status Describe(KServeHttp *http, const std::string &name, std::vector<TensorSpec> *ins,
                std::vector<TensorSpec> *outs) {
  json::Value meta, model_config;
  Status s = http->Metadata(name, &meta);
  if (s.IsOk()) s = http->Config(name, &model_config);
  const json::Value *max_batch = model_config.Find("max_batch_size");
  bool batched = max_batch != nullptr && max_batch->AsInt(0) > 0;
  if (s.IsOk()) s = Specs(meta.Find("inputs"), batched, ins);
  if (s.IsOk()) s = Specs(meta.Find("outputs"), batched, outs);
  return s;
}

std::string ShapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d == 0 ? "" : ",") + std::to_string(shape[d]);
  return out + "]";
}

}  // namespace

std::string FixedDimsChanged(const std::vector<TensorSpec> &inputs, const std::vector<std::vector<int64_t>> &shapes) {
  std::string key;
  for (size_t i = 0; i < inputs.size() && i < shapes.size(); ++i) {
    const std::vector<int64_t> &declared = inputs[i].declared;
    if (declared.size() != shapes[i].size()) continue;  // another rank: refused as it is
    std::string dims;
    for (size_t d = 0; d < declared.size(); ++d) {
      if (declared[d] >= 0 && declared[d] != shapes[i][d]) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    }
    if (!dims.empty()) key += (key.empty() ? "" : ";") + inputs[i].name + ":" + dims;
  }
  return key;
}

Status ModelParallelRunner::Impl::Rebuild(const std::vector<TensorSpec> &declared,
                                          const std::vector<std::vector<int64_t>> &shapes, std::string *name,
                                          std::vector<TensorSpec> *ins, std::vector<TensorSpec> *outs) {
  std::map<std::string, std::vector<int64_t>> asked;  // sorted by name, as the Python client writes it
  for (size_t i = 0; i < declared.size() && i < shapes.size(); ++i) asked[declared[i].name] = shapes[i];
  if (source.empty()) {
    std::string shown;
    for (const auto &entry : asked) {
      shown += (shown.empty() ? "'" : ", '") + entry.first + "' " + ShapeText(entry.second);
    }
    return Status(kLiteNotSupport, "a model bound with triton:// keeps the shapes of its server config; it cannot "
                                   "take input " + shown);
  }
  std::string resized;
  for (const auto &entry : asked) {
    resized += (resized.empty() ? "{" : ",") + json::Quote(entry.first) + ":" + ShapeText(entry.second);
  }
  resized += "}";
  std::string file;
  const std::string *model = bytes.get();
  if (model == nullptr) {
    std::ifstream in(source, std::ios::binary);
    file.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in) return Status(kLiteFileError, "model_path cannot be read again: " + source);
    model = &file;
  }
  Status s = Upload(http.get(), source, *model, config, sections, name, resized);
  if (s.IsOk()) s = Describe(http.get(), *name, ins, outs);
  return s;
}

void ModelParallelRunner::Impl::Adopt(const std::string &name, std::vector<TensorSpec> ins,
                                      std::vector<TensorSpec> outs) {
  std::unique_lock<std::shared_mutex> write(lock);
  model = name;
  inputs = std::move(ins);
  outputs = std::move(outs);
  output_names.clear();
  for (const TensorSpec &spec : outputs) output_names.push_back(spec.name);
}

std::vector<MSTensor> ModelParallelRunner::Impl::Tensors(bool in) const {
  std::shared_lock<std::shared_mutex> read(lock);
  std::vector<MSTensor> out;
  for (const TensorSpec &s : in ? inputs : outputs) out.emplace_back(s.name, s.type, s.shape, nullptr, 0);
  return out;
}

ModelParallelRunner::ModelParallelRunner() : impl_(std::make_unique<Impl>()) {}

ModelParallelRunner::~ModelParallelRunner() {
  std::unique_lock<std::shared_mutex> write(impl_->lock);  // waits for the calls in flight
}

Status ModelParallelRunner::Init(const std::string &model_path, const std::shared_ptr<RunnerConfig> &runner_config) {
  try {
    return impl_->Start(model_path, nullptr, runner_config, kInit);
  } catch (const std::exception &e) {  // bad_alloc and the like: nothing throws across the API
    return Status(kLiteMemoryFailed, std::string("ModelParallelRunner's init failed! ") + e.what());
  }
}

Status ModelParallelRunner::Init(const void *model_data, size_t data_size,
                                 const std::shared_ptr<RunnerConfig> &runner_config) {
  try {
    if (model_data == nullptr || data_size == 0) {
      return Status(kLiteNullptr, "ModelParallelRunner's init failed! the model buffer is empty");
    }
    const std::string bytes(static_cast<const char *>(model_data), data_size);
    return impl_->Start("model", &bytes, runner_config, kInit);
  } catch (const std::exception &e) {
    return Status(kLiteMemoryFailed, std::string("ModelParallelRunner's init failed! ") + e.what());
  }
}

Status ModelParallelRunner::Impl::Start(const std::string &model_path, const std::string *model_bytes,
                                        const std::shared_ptr<RunnerConfig> &runner_config, const char *what) {
  std::unique_lock<std::shared_mutex> write(lock);
  if (http != nullptr) return Status(kSuccess, "already initialised with '" + model + "'");
  RunnerConfig defaults;
  const RunnerConfig &config = runner_config ? *runner_config : defaults;
  Sections sections;
  Status s = ReadSections(config, &sections);
  if (s.IsError()) return Prefixed(what, s);
  long bound = 0;
  s = RunnerCount(sections, protocol::MAX_PENDING_KEY, protocol::DEFAULT_MAX_PENDING, &bound);
  if (s.IsError()) return Prefixed(what, s);
  std::shared_ptr<Context> ctx = config.GetContext();
  std::string url, key;
  s = ResolveServer(ctx ? ctx->GetServerUrl() : "", &url, &key);
  std::unique_ptr<KServeHttp> server;
  if (s.IsOk()) s = KServeHttp::Create(url, key, &server);
  if (s.IsOk()) s = server->Live();
  std::string name;
  const std::string prefix = protocol::BIND_PREFIX;
  if (s.IsOk() && model_bytes != nullptr) {
    s = Upload(server.get(), model_path, *model_bytes, config, sections, &name);
  } else if (s.IsOk() && model_path.compare(0, prefix.size(), prefix) == 0) {
    name = model_path.substr(prefix.size());
  } else if (s.IsOk()) {
    std::ifstream in(model_path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    s = in ? Upload(server.get(), model_path, bytes, config, sections, &name)
           : Status(kLiteFileError, "model_path does not exist or cannot be read: " + model_path);
  }
  if (s.IsOk()) s = Describe(server.get(), name, &inputs, &outputs);
  if (s.IsError()) return Prefixed(what, s);
  source = model_path.compare(0, prefix.size(), prefix) == 0 && model_bytes == nullptr ? "" : model_path;
  if (model_bytes != nullptr) bytes = std::make_shared<const std::string>(*model_bytes);
  this->config = config;
  this->sections = sections;
  output_names.clear();
  for (const TensorSpec &spec : outputs) output_names.push_back(spec.name);
  max_pending = static_cast<int>(bound);
  model = name;
  http = std::move(server);
  return kSuccess;
}

std::vector<MSTensor> ModelParallelRunner::GetInputs() {
  try {
    return impl_->Tensors(true);
  } catch (...) {
    return {};
  }
}

std::vector<MSTensor> ModelParallelRunner::GetOutputs() {
  try {
    return impl_->Tensors(false);
  } catch (...) {
    return {};
  }
}

Status ModelParallelRunner::Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                                    const MSKernelCallBack &before, const MSKernelCallBack &after) {
  return impl_->Predict(inputs, outputs, before, after);
}

Status ModelParallelRunner::Impl::Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs,
                                          const MSKernelCallBack &before, const MSKernelCallBack &after,
                                          bool rebuild) {
  try {
    if (before || after) {
      return Status(kLiteNotSupport, "predict failed! kernel callbacks are not available: the server runs the graph");
    }
    if (outputs == nullptr) return Status(kLiteNullptr, "predict failed! outputs must not be null");
    if (inputs.empty()) return Status(kLiteError, "predict failed! inputs must not be empty");
    std::shared_lock<std::shared_mutex> read(lock);
    if (http == nullptr) return Status(kLiteNullptr, "predict failed! call Init first");
    if (inputs.size() != this->inputs.size()) {
      return Status(kLiteInputTensorError, "model input len:" + std::to_string(this->inputs.size()) +
                                               " not equal input len:" + std::to_string(inputs.size()) + "!");
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const MSTensor &t = inputs[i];
      const std::string &name = this->inputs[i].name;
      if (t != nullptr && t.Data() == nullptr && TensorAccess::DeviceData(t) != nullptr) {
        return Status(kLiteNotSupport, "predict failed! input '" + name + "' " + kDeviceMemory);
      }
      if (t == nullptr || t.Data() == nullptr || t.ElementNum() < 0) {
        return Status(kLiteInputTensorError, "predict failed! input " + std::to_string(i) + " ('" + name +
                                                 "') has no data or a dynamic shape; set its shape and data");
      }
      if (TensorAccess::Capacity(t) < t.DataSize()) {  // the shape grew after the data was set: never read past it
        return Status(kLiteInputTensorError, "predict failed! input '" + name + "' holds " +
                                                 std::to_string(TensorAccess::Capacity(t)) +
                                                 " bytes; its shape needs " + std::to_string(t.DataSize()) +
                                                 " (set the shape, then the data)");
      }
      names.push_back(name);
    }
    if (!outputs->empty() && outputs->size() != this->outputs.size()) {
      return Status(kLiteParamInvalid, "predict failed! outputs must be empty or hold one tensor per model output (" +
                                           std::to_string(this->outputs.size()) + ")");
    }
    for (const MSTensor &t : *outputs) {
      if (t != nullptr && t.Data() == nullptr && TensorAccess::DeviceData(t) != nullptr) {
        return Status(kLiteNotSupport, "predict failed! output '" + t.Name() + "' " + kDeviceMemory);
      }
    }
    std::string target = model;
    std::vector<std::vector<int64_t>> shapes;
    for (const MSTensor &t : inputs) shapes.push_back(t.Shape());
    const std::string changed = rebuild ? FixedDimsChanged(this->inputs, shapes) : "";
    if (!changed.empty()) {  // MindSpore Lite's workers resize to any shape the graph runs
      std::lock_guard<std::mutex> one(resize_lock);
      auto found = resized.find(changed);
      if (found == resized.end()) {
        std::vector<TensorSpec> ins, outs;
        Status s = Rebuild(this->inputs, shapes, &target, &ins, &outs);
        if (s.IsError()) return Prefixed("predict", s);
        found = resized.emplace(changed, target).first;
      }
      target = found->second;
    }
    // MindSpore Lite's task-queue bound, kept in the caller's runner: refused at once, nothing sent.
    int bound = max_pending;
    if (pending.fetch_add(1) + 1 > bound && bound > 0) {
      pending.fetch_sub(1);
      return Status(kLiteServiceDeny, "predict failed! The number of waiting tasks in the queue exceeds the limit: " +
                                          std::to_string(bound) + " predicts of this runner are in flight ([" +
                                          protocol::RUNNER_SECTION + "] " + protocol::MAX_PENDING_KEY + "=" +
                                          std::to_string(bound) + ")");
    }
    struct Done {
      std::atomic<int> &pending;
      ~Done() { pending.fetch_sub(1); }
    } done{pending};
    std::string body;
    std::vector<OutputView> views;
    Status s = http->Infer(target, names, inputs, output_names, &body, &views);
    if (s.IsError()) return Prefixed("predict", s);
    if (views.empty()) return Status(kLiteError, "predict failed! the server returned no outputs");
    bool in_place = !outputs->empty();
    for (size_t i = 0; i < views.size(); ++i) {
      const OutputView &v = views[i];
      if (!in_place) outputs->emplace_back(v.name, v.type, std::vector<int64_t>(), nullptr, 0);
      const char *bytes = body.data() + v.offset;
      if (i >= outputs->size() || !TensorAccess::Fill(&(*outputs)[i], v.type, v.shape, bytes, v.size)) {
        return Status(kLiteMemoryFailed, "predict failed! cannot store output '" + v.name + "'");
      }
    }
    return kSuccess;
  } catch (const std::exception &e) {
    return Status(kLiteMemoryFailed, std::string("predict failed! ") + e.what());
  }
}

std::string ModelParallelRunner::GetModelName() const {
  std::shared_lock<std::shared_mutex> read(impl_->lock);
  return impl_->model;
}

int ModelParallelRunner::GetPendingPredicts() const { return impl_->pending.load(); }

}  // namespace mslite_triton
