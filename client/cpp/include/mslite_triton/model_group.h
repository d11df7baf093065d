// MindSpore Lite's mindspore::ModelGroup and ModelGroupFlag (include/api/model_group.h), mapped onto the server:
// - kShareWeight: the group's models built from the same bytes share one server model (one set of workers,
//   one copy of the weights), even when their contexts differ: the first Build's settings serve them all.
// - kShareWorkspace: nothing to share: a workspace lives inside one worker process, sized by ONNX Runtime per
//   run. AddModel with paths and CalMaxSizeOfWorkspace check their arguments and return.
// - kShareWeightAndWorkspace: both, so in effect kShareWeight.
// AddModel takes what MindSpore Lite's cloud runtime takes under each flag: paths under any flag, buffers
// under kShareWorkspace only, Model objects under kShareWeight only; else kLiteError ("Only support ...").
#ifndef MSLITE_TRITON_MODEL_GROUP_H_
#define MSLITE_TRITON_MODEL_GROUP_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mslite_triton/context.h"
#include "mslite_triton/model.h"
#include "mslite_triton/status.h"
#include "mslite_triton/types.h"

namespace mslite_triton {

enum class ModelGroupFlag : int {
  kUnknown = 0x0000,
  kShareWeight = 0x0001,
  kShareWorkspace = 0x0002,
  kShareWeightAndWorkspace = 0x0003,
};

class ModelGroup {
 public:
  explicit ModelGroup(ModelGroupFlag flags = ModelGroupFlag::kShareWorkspace);
  ~ModelGroup();

  // Paths (any flag) or buffers (kShareWorkspace only, else kLiteError): workspace sharing; kLiteParamInvalid
  // for an empty list (an empty path or buffer in it is skipped).
  Status AddModel(const std::vector<std::string> &model_path_list);
  Status AddModel(const std::vector<std::pair<const void *, size_t>> &model_buff_list);
  // Models not built yet: weight sharing (kShareWeight only, else kLiteError; kLiteError for a model in another
  // group; kLiteParamInvalid for a model built already, whose build could share nothing any more).
  Status AddModel(const std::vector<Model> &model_list);
  // Checks its arguments: kLiteNullptr without a context; kLiteError for the GE provider, as MindSpore Lite;
  // kLiteNotSupport for an Ascend context or an Ascend model type (MindSpore Lite sizes an Ascend workspace
  // here; this server has CPU and GPU workers); kLiteError for paths added to a group of an unknown flag.
  Status CalMaxSizeOfWorkspace(ModelType model_type, const std::shared_ptr<Context> &ms_context);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::ModelGroup;
using mslite_triton::ModelGroupFlag;
}  // namespace mindspore

#endif  // MSLITE_TRITON_MODEL_GROUP_H_
