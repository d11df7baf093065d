#include "mslite_triton/model_group.h"

#include "model_group_impl.h"

namespace mslite_triton {
namespace {

Status CheckFlags(ModelGroupFlag flags) {
  if (flags == ModelGroupFlag::kShareWeight || flags == ModelGroupFlag::kShareWorkspace ||
      flags == ModelGroupFlag::kShareWeightAndWorkspace) {
    return kSuccess;
  }
  return Status(kLiteParamInvalid, "AddModel failed! the group's flags must be kShareWeight, kShareWorkspace or "
                                   "kShareWeightAndWorkspace");
}

}  // namespace

ModelGroup::ModelGroup(ModelGroupFlag flags) : impl_(std::make_shared<Impl>(flags)) {}
ModelGroup::~ModelGroup() = default;

Status ModelGroup::AddModel(const std::vector<std::string> &model_path_list) {
  Status s = CheckFlags(impl_->flags);
  if (s.IsError()) return s;
  if (model_path_list.empty()) return Status(kLiteParamInvalid, "AddModel failed! the list of model paths is empty");
  for (const std::string &path : model_path_list) {
    if (path.empty()) return Status(kLiteParamInvalid, "AddModel failed! a model path is empty");
  }
  return kSuccess;  // workspaces live in each worker process: nothing to plan here
}

Status ModelGroup::AddModel(const std::vector<std::pair<const void *, size_t>> &model_buff_list) {
  Status s = CheckFlags(impl_->flags);
  if (s.IsError()) return s;
  if (model_buff_list.empty()) return Status(kLiteParamInvalid, "AddModel failed! the list of model buffers is empty");
  for (const auto &buffer : model_buff_list) {
    if (buffer.first == nullptr || buffer.second == 0) {
      return Status(kLiteParamInvalid, "AddModel failed! a model buffer is empty");
    }
  }
  return kSuccess;
}

Status ModelGroup::AddModel(const std::vector<Model> &model_list) {
  Status s = CheckFlags(impl_->flags);
  if (s.IsError()) return s;
  if (model_list.empty()) return Status(kLiteParamInvalid, "AddModel failed! the list of models is empty");
  for (const Model &model : model_list) {
    if (!model.GetModelName().empty()) {
      return Status(kLiteParamInvalid, "AddModel failed! add models to a group before building them");
    }
  }
  for (const Model &model : model_list) ModelAccess::Join(model, impl_);
  return kSuccess;
}

Status ModelGroup::CalMaxSizeOfWorkspace(ModelType model_type, const std::shared_ptr<Context> &ms_context) {
  if (ms_context == nullptr) return Status(kLiteNullptr, "CalMaxSizeOfWorkspace failed! the context is null");
  for (const auto &device : ms_context->MutableDeviceInfo()) {
    DeviceType type = device == nullptr ? kCPU : device->GetDeviceType();
    if (type == kAscend || type == kAscend310 || type == kAscend910 || model_type == kAIR || model_type == kOM) {
      return Status(kLiteNotSupport, "CalMaxSizeOfWorkspace failed! the shared workspace is Ascend device memory, "
                                     "and this server runs CPU and GPU workers (each sizes its own workspace)");
    }
  }
  return kSuccess;
}

}  // namespace mslite_triton
