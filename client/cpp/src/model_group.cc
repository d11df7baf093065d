#include "mslite_triton/model_group.h"

#include "model_group_impl.h"

namespace mslite_triton {
namespace {

const char *FlagName(ModelGroupFlag flags) {
  switch (flags) {
    case ModelGroupFlag::kShareWeight:
      return "kShareWeight";
    case ModelGroupFlag::kShareWorkspace:
      return "kShareWorkspace";
    case ModelGroupFlag::kShareWeightAndWorkspace:
      return "kShareWeightAndWorkspace";
    default:
      return "an unknown flag";
  }
}

}  // namespace

ModelGroup::ModelGroup(ModelGroupFlag flags) : impl_(std::make_shared<Impl>(flags)) {}
ModelGroup::~ModelGroup() = default;

// The flag rules are MindSpore Lite's cloud runtime's: paths under any flag, buffers under kShareWorkspace
// only, models under kShareWeight only (kShareWeightAndWorkspace takes paths alone).
Status ModelGroup::AddModel(const std::vector<std::string> &model_path_list) {
  if (model_path_list.empty()) return Status(kLiteParamInvalid, "AddModel failed! the list of model paths is empty");
  std::lock_guard<std::mutex> hold(impl_->lock);
  for (const std::string &path : model_path_list) {
    if (!path.empty()) impl_->paths.push_back(path);  // an empty path is skipped, as MindSpore Lite does
  }
  return kSuccess;  // workspaces live in each worker process: nothing to plan here
}

Status ModelGroup::AddModel(const std::vector<std::pair<const void *, size_t>> &model_buff_list) {
  if (impl_->flags != ModelGroupFlag::kShareWorkspace) {
    return Status(kLiteError, std::string("AddModel failed! Only support share workspace for AddModel of model "
                                          "buffers: this group was made with ") +
                                  FlagName(impl_->flags));
  }
  if (model_buff_list.empty()) return Status(kLiteParamInvalid, "AddModel failed! the list of model buffers is empty");
  return kSuccess;  // a null or empty buffer is skipped, as MindSpore Lite does
}

Status ModelGroup::AddModel(const std::vector<Model> &model_list) {
  if (impl_->flags != ModelGroupFlag::kShareWeight) {
    return Status(kLiteError, std::string("AddModel failed! Only support share weight for AddModel of Model objects: "
                                          "this group was made with ") +
                                  FlagName(impl_->flags));
  }
  for (const Model &model : model_list) {
    if (!model.GetModelName().empty()) {
      return Status(kLiteParamInvalid, "AddModel failed! add models to a group before building them");
    }
    if (ModelAccess::Group(model) != nullptr && ModelAccess::Group(model) != impl_) {
      return Status(kLiteError, "AddModel failed! the model has been in another group");
    }
  }
  for (const Model &model : model_list) ModelAccess::Join(model, impl_);
  return kSuccess;
}

Status ModelGroup::CalMaxSizeOfWorkspace(ModelType model_type, const std::shared_ptr<Context> &ms_context) {
  if (ms_context == nullptr) return Status(kLiteNullptr, "CalMaxSizeOfWorkspace failed! the context is null");
  const auto &devices = ms_context->MutableDeviceInfo();
  if (!devices.empty() && devices.front() != nullptr && devices.front()->GetProvider() == "ge") {
    return Status(kLiteError, "CalMaxSizeOfWorkspace failed! Not Support GE model: the GE provider sizes its own");
  }
  for (const auto &device : devices) {
    DeviceType type = device == nullptr ? kCPU : device->GetDeviceType();
    if (type == kAscend || type == kAscend310 || type == kAscend910 || model_type == kAIR || model_type == kOM) {
      return Status(kLiteNotSupport, "CalMaxSizeOfWorkspace failed! the shared workspace is Ascend device memory, "
                                     "and this server runs CPU and GPU workers (each sizes its own workspace)");
    }
  }
  std::lock_guard<std::mutex> hold(impl_->lock);
  if (!impl_->paths.empty() && impl_->flags != ModelGroupFlag::kShareWeight &&
      impl_->flags != ModelGroupFlag::kShareWorkspace && impl_->flags != ModelGroupFlag::kShareWeightAndWorkspace) {
    return Status(kLiteError, "CalMaxSizeOfWorkspace failed! Only Support share weight and share workspace: this "
                              "group was made with an unknown flag");
  }
  impl_->paths.clear();  // sized: MindSpore Lite forgets the paths it has planned
  return kSuccess;
}

}  // namespace mslite_triton
