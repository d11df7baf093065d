// What the runner does to tensors beyond the public API (not installed).
#ifndef MSLITE_TRITON_SRC_TENSOR_ACCESS_H_
#define MSLITE_TRITON_SRC_TENSOR_ACCESS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mslite_triton/types.h"

namespace mslite_triton {

struct TensorAccess {
  // Sets type and shape and copies `size` bytes in: into the tensor's own buffer when it holds that many
  // (MindSpore Lite's sample allocates the outputs itself), else into a new owned one. False: out of memory.
  // Bytes the tensor's data holds: what was allocated for it, or DataSize() when the caller set it.
  static size_t Capacity(const MSTensor &tensor);
  // What SetDeviceData set (nullptr: none).
  static void *DeviceData(const MSTensor &tensor);
  static bool Fill(MSTensor *tensor, enum DataType type, const std::vector<int64_t> &shape, const char *bytes,
                   size_t size);
};

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_TENSOR_ACCESS_H_
