#include <cstdlib>
#include <initializer_list>
#include <string>

#include "mslite_triton/context.h"

namespace mslite_triton {
namespace {

// The first of `names` the environment sets to a number; `otherwise` without one. MPI launchers name a
// process's rank and the world's size in these (Open MPI's, then the PMI ones of MPICH and Slurm).
int FromEnvironment(std::initializer_list<const char *> names, int otherwise) {
  for (const char *name : names) {
    const char *value = std::getenv(name);
    char *end = nullptr;
    long number = value == nullptr ? -1 : std::strtol(value, &end, 10);
    if (value != nullptr && *value != '\0' && *end == '\0' && number >= 0 && number < (1L << 30)) {
      return static_cast<int>(number);
    }
  }
  return otherwise;
}

}  // namespace

int GPUDeviceInfo::GetRankID() const { return FromEnvironment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, 0); }

int GPUDeviceInfo::GetGroupSize() const { return FromEnvironment({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1); }

}  // namespace mslite_triton
