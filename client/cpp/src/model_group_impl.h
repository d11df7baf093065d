// What a ModelGroup holds, read by the Models added to it (not installed).
#ifndef MSLITE_TRITON_SRC_MODEL_GROUP_IMPL_H_
#define MSLITE_TRITON_SRC_MODEL_GROUP_IMPL_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "encoding.h"
#include "mslite_triton/model_group.h"

namespace mslite_triton {

class ModelGroup::Impl {
 public:
  explicit Impl(ModelGroupFlag group_flags) : flags(group_flags) {}

  bool SharesWeights() const {
    return flags == ModelGroupFlag::kShareWeight || flags == ModelGroupFlag::kShareWeightAndWorkspace;
  }
  // The server model a member built from these bytes ("" when none, or when the group shares no weights).
  std::string Shared(const std::string &model) {
    std::lock_guard<std::mutex> hold(lock);
    auto found = built.find(Sha256Hex({&model}));
    return SharesWeights() && found != built.end() ? found->second : "";
  }
  void Record(const std::string &model, const std::string &server_model) {
    std::lock_guard<std::mutex> hold(lock);
    built.emplace(Sha256Hex({&model}), server_model);
  }

  const ModelGroupFlag flags;
  std::mutex lock;
  std::map<std::string, std::string> built;  // the bytes' SHA-256 -> the server model built from them
  std::vector<std::string> paths;            // AddModel's paths, until CalMaxSizeOfWorkspace
};

struct ModelAccess {
  static void Join(const Model &model, const std::shared_ptr<ModelGroup::Impl> &group);
  static std::shared_ptr<ModelGroup::Impl> Group(const Model &model);  // null: in no group
};

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_MODEL_GROUP_IMPL_H_
