#include "mslite_triton/model_parallel_runner.h"

namespace mslite_triton {

void RunnerConfig::SetConfigInfo(const std::string &section, const std::map<std::string, std::string> &config) {
  for (const auto &entry : config) config_info_[section][entry.first] = entry.second;
}

}  // namespace mslite_triton
