#include "model_configs.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "encoding.h"
#include "json.h"
#include "protocol.h"

namespace mslite_triton {
namespace {

std::string Trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// An int >= 0 (at most 9 digits) of `section`; `otherwise` when the key is absent. `rule` words the refusal.
Status Count(const Sections &sections, const char *section, const char *key, long otherwise, const char *rule,
             long *value) {
  *value = otherwise;
  auto found = sections.find(section);
  if (found == sections.end() || found->second.count(key) == 0) return kSuccess;
  const std::string &raw = found->second.at(key);
  std::string text = Trim(raw);
  if (!text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), ::isdigit)) {
    *value = std::stol(text);
    return kSuccess;
  }
  return Status(kLiteParamInvalid,
                std::string("[") + section + "] " + key + " must be " + rule + ", got '" + raw + "'");
}

Status BatchingInt(const Sections &sections, const char *key, long *value) {
  return Count(sections, protocol::BATCHING_SECTION, key, 0, "an int >= 0", value);
}

}  // namespace

std::string DeviceName(DeviceType type) {
  switch (type) {
    case kCPU:
      return "CPU";
    case kGPU:
      return "GPU";
    case kKirinNPU:
      return "the Kirin NPU";
    case kAscend:
    case kAscend910:
    case kAscend310:
      return "Ascend";
    default:
      return "device type " + std::to_string(static_cast<int>(type));
  }
}

Status CheckDevice(DeviceType type) {
  if (type == kCPU || type == kGPU) return kSuccess;
  return Status(kLiteNotSupport, DeviceName(type) + " is not available on this server: it runs CPU and GPU workers "
                                                    "(MindSpore Lite needs the device itself for it)");
}

Status RunnerCount(const Sections &sections, const char *key, long otherwise, long *value) {
  static const char *const kKnown[] = {protocol::MAX_PENDING_KEY, protocol::WORKERS_KEY, protocol::THREADS_KEY};
  auto runner = sections.find(protocol::RUNNER_SECTION);
  if (runner != sections.end()) {
    std::string unknown;
    for (const auto &entry : runner->second) {
      if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char *k) { return entry.first == k; })) {
        unknown += (unknown.empty() ? "" : ", ") + entry.first;
      }
    }
    if (!unknown.empty()) {
      return Status(kLiteParamInvalid, std::string("[") + protocol::RUNNER_SECTION + "] has unknown keys [" + unknown +
                                           "]; known: [" + kKnown[0] + ", " + kKnown[1] + ", " + kKnown[2] + "]");
    }
  }
  return Count(sections, protocol::RUNNER_SECTION, key, otherwise, "a non-negative int", value);
}

Status ReadSections(const RunnerConfig &config, Sections *sections) {
  sections->clear();
  const std::string path = config.GetConfigPath();
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) return Status(kLiteFileError, "cannot read the config file '" + path + "'");
    std::map<std::string, std::string> *current = nullptr;
    for (std::string raw; std::getline(in, raw);) {
      std::string line = Trim(raw);
      if (line.size() <= 2 || line[0] == '#') continue;
      if (line.front() == '[' && line.back() == ']') {
        current = &(*sections)[Trim(line.substr(1, line.size() - 2))];
      } else if (current != nullptr && line.find('=') != std::string::npos) {
        size_t eq = line.find('=');
        current->emplace(Trim(line.substr(0, eq)), Trim(line.substr(eq + 1)));  // the first one wins
      }
    }
  }
  for (const auto &section : config.GetConfigInfo()) {
    for (const auto &entry : section.second) (*sections)[section.first][entry.first] = entry.second;
  }
  return kSuccess;
}

Status BuildModelConfig(const RunnerConfig &config, const Sections &sections, unsigned cores, std::string *members,
                        const std::string &resized) {
  std::shared_ptr<Context> ctx = config.GetContext();
  long threads = ctx ? ctx->GetThreadNum() : 0;
  long workers = config.GetWorkersNum();
  // a tuned config.ini (`mslite-triton tune`) sizes the runner where the code sets nothing
  if (threads <= 0) {
    Status s = RunnerCount(sections, protocol::THREADS_KEY, 0, &threads);
    if (s.IsError()) return s;
  }
  if (workers == 0) {
    Status s = RunnerCount(sections, protocol::WORKERS_KEY, 0, &workers);
    if (s.IsError()) return s;
  }
  long cpus = std::max(1u, cores);
  if (workers < 0 || workers > 5 * cpus) {
    return Status(kLiteParamInvalid, "user set worker num " + std::to_string(workers) + " is invalid: more than 5 x " +
                                         std::to_string(cpus) + " cores");
  }
  if (threads <= 0) {  // MindSpore Lite's default: half the cores up to 16, else 8; fit the workers in
    threads = cpus <= 16 ? std::max(1L, cpus / 2) : 8;
    if (workers > 0 && workers * threads > cpus) threads = std::max(1L, cpus / workers);
  }
  if (workers == 0) workers = std::max(1L, cpus / threads);

  bool gpu = false;
  bool fp16 = false;
  std::vector<uint32_t> ids = config.GetDeviceIds();
  if (ctx && !ctx->MutableDeviceInfo().empty() && ctx->MutableDeviceInfo().front() != nullptr) {
    const auto &first = ctx->MutableDeviceInfo().front();  // the first device decides, as the server runs one kind
    DeviceType type = first->GetDeviceType();
    Status s = CheckDevice(type);
    if (s.IsError()) return s;
    gpu = type == kGPU;
    fp16 = first->GetEnableFP16();
    if (gpu && ids.empty()) ids.push_back(first->Cast<GPUDeviceInfo>()->GetDeviceID());
  }
  if (ids.empty()) ids.push_back(0);

  std::string groups;
  for (long i = 0; i < workers; ++i) {
    if (i > 0) groups += ",";
    groups += gpu ? R"({"kind":"KIND_GPU","count":1,"gpus":[)" + std::to_string(ids[i % ids.size()]) + "]}"
                  : R"({"kind":"KIND_CPU","count":1})";
  }
  int inter_op = ctx && ctx->GetInterOpParallelNum() > 0 ? ctx->GetInterOpParallelNum() : 1;
  std::vector<std::pair<std::string, std::string>> params = {
      {"thread_num", std::to_string(threads)},
      {"inter_op_parallel_num", std::to_string(inter_op)},
      {"thread_affinity_mode", std::to_string(ctx ? ctx->GetThreadAffinityMode() : 0)},
      {"precision_mode", fp16 ? "preferred_fp16" : "enforce_fp32"},
  };
  std::string cores_listed;  // the backend checks and applies it, as for the Python and Java clients
  for (int32_t core : ctx ? ctx->GetThreadAffinityCoreList() : std::vector<int32_t>()) {
    cores_listed += (cores_listed.empty() ? "" : ",") + std::to_string(core);
  }
  if (!cores_listed.empty()) params.emplace_back(protocol::THREAD_AFFINITY_CORE_LIST_PARAMETER, cores_listed);
  if (!resized.empty()) params.emplace_back(protocol::RESIZED_INPUTS_PARAMETER, resized);
  static const std::map<std::string, std::string> kNone;
  auto found = sections.find(protocol::BATCHING_SECTION);
  const auto &batching = found == sections.end() ? kNone : found->second;
  for (const auto &section : sections) {
    if (section.first == protocol::BATCHING_SECTION || section.first == protocol::RUNNER_SECTION) continue;
    for (const auto &entry : section.second) params.emplace_back(section.first + "." + entry.first, entry.second);
  }
  std::string wrapped;
  for (const auto &p : params) {
    if (!wrapped.empty()) wrapped += ",";
    wrapped += json::Quote(p.first) + R"(:{"string_value":)" + json::Quote(p.second) + "}";
  }

  long delay = 0, bound = 0, batch = 0;
  Status s = BatchingInt(sections, protocol::MAX_QUEUE_DELAY_KEY, &delay);
  if (s.IsOk()) s = BatchingInt(sections, protocol::MAX_QUEUE_SIZE_KEY, &bound);
  if (s.IsOk()) s = BatchingInt(sections, protocol::MAX_BATCH_SIZE_KEY, &batch);
  if (s.IsError()) return s;

  std::string out = R"("backend":"mslite","instance_group":[)" + groups + "]";
  if (!batching.empty()) {  // without one, auto-complete adds the batcher with the backend's sizes
    out += std::string(",\"") + protocol::BATCHING_SECTION + "\":{\"" + protocol::MAX_QUEUE_DELAY_KEY +
           "\":" + std::to_string(delay);
    if (bound > 0) {  // opt-in, as 0 means no bound in Triton too
      out += std::string(",\"") + protocol::QUEUE_POLICY_KEY + "\":{\"" + protocol::MAX_QUEUE_SIZE_KEY +
             "\":" + std::to_string(bound) + "}";
    }
    out += "}";
  }
  out += ",\"parameters\":{" + wrapped + "}";
  if (batching.count(protocol::MAX_BATCH_SIZE_KEY) != 0) {
    out += std::string(",\"") + protocol::MAX_BATCH_SIZE_KEY + "\":" + std::to_string(batch);
  }
  *members = out;
  return kSuccess;
}

std::string UploadName(const std::string &model_path, const std::string &config_members, const std::string &model) {
  std::string file = model_path.substr(model_path.find_last_of('/') == std::string::npos
                                           ? 0
                                           : model_path.find_last_of('/') + 1);
  std::string stem = file.substr(0, file.find_last_of('.'));
  for (char &c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  stem = stem.empty() ? "model" : stem.substr(0, 40);
  std::string config = "{" + config_members + "}";
  return stem + "_" + Sha256Hex({&config, &model}).substr(0, 12);
}

}  // namespace mslite_triton
