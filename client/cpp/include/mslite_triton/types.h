// MindSpore Lite's mindspore::DataType and mindspore::MSTensor (include/api/data_type.h, types.h).
#ifndef MSLITE_TRITON_TYPES_H_
#define MSLITE_TRITON_TYPES_H_

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mslite_triton {

// MindSpore Lite's type numbers; those with a KServe v2 datatype travel to the server.
enum class DataType : int {
  kTypeUnknown = 0,
  kObjectTypeString = 12,
  kNumberTypeBool = 30,
  kNumberTypeInt8 = 32,
  kNumberTypeInt16 = 33,
  kNumberTypeInt32 = 34,
  kNumberTypeInt64 = 35,
  kNumberTypeUInt8 = 37,
  kNumberTypeUInt16 = 38,
  kNumberTypeUInt32 = 39,
  kNumberTypeUInt64 = 40,
  kNumberTypeFloat16 = 42,
  kNumberTypeFloat32 = 43,
  kNumberTypeFloat64 = 44,
  kInvalidType = INT32_MAX,
};

enum Format : int64_t { DEFAULT_FORMAT = -1, NCHW = 0, NHWC = 1 };

// A tensor handle, as MindSpore Lite's: copies share one tensor (name, type, shape, data), so the tensors
// GetInputs() returns can be filled through any copy. Data set with SetData(data, true) or allocated by
// MutableData() is released with free() when the last handle goes.
class MSTensor {
 public:
  class Impl;

  MSTensor();
  explicit MSTensor(std::nullptr_t);
  MSTensor(const std::string &name, enum DataType type, const std::vector<int64_t> &shape, const void *data,
           size_t data_len);  // copies data_len bytes of data (none when data is null)
  ~MSTensor();
  MSTensor(const MSTensor &) = default;
  MSTensor &operator=(const MSTensor &) = default;
  MSTensor(MSTensor &&) noexcept = default;
  MSTensor &operator=(MSTensor &&) noexcept = default;

  // A new tensor owning a copy of data; nullptr on bad arguments. Release it with DestroyTensorPtr.
  static MSTensor *CreateTensor(const std::string &name, enum DataType type, const std::vector<int64_t> &shape,
                                const void *data, size_t data_len) noexcept;
  static void DestroyTensorPtr(MSTensor *tensor) noexcept;
  // A new tensor with its own copy of this one's data; release with DestroyTensorPtr.
  MSTensor *Clone() const;

  std::string Name() const;
  void SetTensorName(const std::string &name);
  enum DataType DataType() const;
  void SetDataType(enum DataType data_type);
  const std::vector<int64_t> &Shape() const;
  void SetShape(const std::vector<int64_t> &shape);
  enum Format format() const;
  void SetFormat(enum Format format);
  // Product of the dims; -1 while a dim is dynamic (negative).
  int64_t ElementNum() const;
  // ElementNum() x the type's size in bytes (0 while the shape is dynamic or the type unknown).
  size_t DataSize() const;
  // The data, kept alive by the pointer even if the tensor goes; null when there is none.
  std::shared_ptr<const void> Data() const;
  // The data to write into; allocated (DataSize() bytes, owned) when there is none yet, or when owned data
  // is smaller than DataSize(). Null for a null tensor or while the shape is dynamic.
  void *MutableData();
  // Uses `data` (DataSize() bytes are read from it); own_data: free() it when the tensor goes or gets other data.
  void SetData(void *data, bool own_data = true);
  bool IsConst() const { return false; }
  // Device (GPU) memory for the data, as MindSpore Lite's: kept so ported code compiles and reads back what
  // it set. This client sends host memory only, so Predict refuses a tensor whose data lies on a device.
  void SetDeviceData(void *data);
  void *GetDeviceData();

  bool operator==(std::nullptr_t) const { return impl_ == nullptr; }
  bool operator!=(std::nullptr_t) const { return impl_ != nullptr; }
  bool operator==(const MSTensor &tensor) const { return impl_ == tensor.impl_; }
  bool operator!=(const MSTensor &tensor) const { return impl_ != tensor.impl_; }

 private:
  friend struct TensorAccess;  // the runner fills output tensors in place
  std::shared_ptr<Impl> impl_;
};

// MindSpore Lite's per-kernel callback types, so ported Predict calls compile. The server runs the graph, so
// there are no kernels to call back from: Predict refuses a callback with kLiteNotSupport.
struct MSCallBackParam {
  std::string node_name;
  std::string node_type;
  double execute_time = 0;
};
using MSKernelCallBack = std::function<bool(const std::vector<MSTensor> &inputs, const std::vector<MSTensor> &outputs,
                                            const MSCallBackParam &opInfo)>;

// Bytes per element of a type; 0 for types without a fixed size.
size_t DataTypeSize(enum DataType type);

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::DataType;
using mslite_triton::DEFAULT_FORMAT;
using mslite_triton::Format;
using mslite_triton::MSCallBackParam;
using mslite_triton::MSKernelCallBack;
using mslite_triton::MSTensor;
using mslite_triton::NCHW;
using mslite_triton::NHWC;
}  // namespace mindspore

#endif  // MSLITE_TRITON_TYPES_H_
