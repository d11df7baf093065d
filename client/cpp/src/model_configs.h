// RunnerConfig -> the Triton model config of an upload, with the Python client's rules (as the Java
// client's ModelConfigs): MindSpore Lite's worker and thread defaults, one instance group per worker, the
// threads and config sections as `mslite` backend parameters, and Triton's dynamic batcher only when a
// [dynamic_batching] section asks (without one, the backend's auto-complete adds it with its batch sizes).
#ifndef MSLITE_TRITON_SRC_MODEL_CONFIGS_H_
#define MSLITE_TRITON_SRC_MODEL_CONFIGS_H_

#include <map>
#include <string>

#include "mslite_triton/model_parallel_runner.h"
#include "mslite_triton/status.h"

namespace mslite_triton {

using Sections = std::map<std::string, std::map<std::string, std::string>>;

// "Ascend" for kAscend, kAscend310 and kAscend910; "GPU", "CPU", ...: what messages call a device.
std::string DeviceName(DeviceType type);
// kLiteNotSupport, naming the device, unless CPU or GPU.
Status CheckDevice(DeviceType type);

// The config file's sections, overridden key by key by SetConfigInfo's. kLiteFileError: unreadable file.
Status ReadSections(const RunnerConfig &config, Sections *sections);

// An int >= 0 of the client-side [runner] section (`otherwise` when absent). kLiteParamInvalid: a key this
// client does not know (max_pending_predicts, workers_num, thread_num), or a value that is not such an int.
Status RunnerCount(const Sections &sections, const char *key, long otherwise, long *value);

// The upload's model config as JSON members (`"backend":...,...`, no braces), for a client with `cores` cores.
// A tuned config.ini's [runner] workers_num and thread_num apply where the code sets none (0).
// `resized` (a JSON object {input name: [full shape]}, or "") asks the server to make the dims the shapes change
// resizable (protocol::RESIZED_INPUTS_PARAMETER).
// kLiteParamInvalid: a worker count or batcher value out of range, or a bad [runner] section; kLiteNotSupport:
// a device the server lacks.
Status BuildModelConfig(const RunnerConfig &config, const Sections &sections, unsigned cores, std::string *members,
                        const std::string &resized = "");

// `<stem>_<12 hex>`: the same file and config map to the same server model, which is then reused.
std::string UploadName(const std::string &model_path, const std::string &config_members, const std::string &model);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_MODEL_CONFIGS_H_
