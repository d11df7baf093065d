#include <cstdlib>
#include <cstring>
#include <new>

#include "mslite_triton/types.h"
#include "tensor_access.h"

namespace mslite_triton {

size_t DataTypeSize(enum DataType type) {
  switch (type) {
    case DataType::kNumberTypeBool:
    case DataType::kNumberTypeInt8:
    case DataType::kNumberTypeUInt8:
      return 1;
    case DataType::kNumberTypeInt16:
    case DataType::kNumberTypeUInt16:
    case DataType::kNumberTypeFloat16:
      return 2;
    case DataType::kNumberTypeInt32:
    case DataType::kNumberTypeUInt32:
    case DataType::kNumberTypeFloat32:
      return 4;
    case DataType::kNumberTypeInt64:
    case DataType::kNumberTypeUInt64:
    case DataType::kNumberTypeFloat64:
      return 8;
    default:
      return 0;
  }
}

class MSTensor::Impl {
 public:
  ~Impl() { Release(); }

  void Release() {
    if (own) std::free(data);
    data = nullptr;
    own = false;
    capacity = 0;
  }

  std::string name;
  enum DataType type = DataType::kTypeUnknown;
  std::vector<int64_t> shape;
  enum Format format = NCHW;
  void *data = nullptr;
  bool own = false;
  size_t capacity = 0;  // bytes the data holds: allocated here, or DataSize() when the caller set it
  void *device_data = nullptr;  // the caller's, never read here
};

MSTensor::MSTensor() : impl_(std::make_shared<Impl>()) {}
MSTensor::MSTensor(std::nullptr_t) {}
MSTensor::~MSTensor() = default;

MSTensor::MSTensor(const std::string &name, enum DataType type, const std::vector<int64_t> &shape, const void *data,
                   size_t data_len)
    : impl_(std::make_shared<Impl>()) {
  impl_->name = name;
  impl_->type = type;
  impl_->shape = shape;
  if (data != nullptr && data_len > 0) {
    impl_->data = std::malloc(data_len);
    if (impl_->data != nullptr) {
      std::memcpy(impl_->data, data, data_len);
      impl_->own = true;
      impl_->capacity = data_len;
    }
  }
}

MSTensor *MSTensor::CreateTensor(const std::string &name, enum DataType type, const std::vector<int64_t> &shape,
                                 const void *data, size_t data_len) noexcept {
  try {
    auto *tensor = new MSTensor(name, type, shape, data, data_len);
    if (data != nullptr && data_len > 0 && tensor->impl_->data == nullptr) {
      delete tensor;
      return nullptr;
    }
    return tensor;
  } catch (...) {  // bad_alloc: no exception crosses the API
    return nullptr;
  }
}

void MSTensor::DestroyTensorPtr(MSTensor *tensor) noexcept { delete tensor; }

MSTensor *MSTensor::Clone() const {
  if (impl_ == nullptr) return new (std::nothrow) MSTensor(nullptr);
  size_t bytes = impl_->data == nullptr ? 0 : DataSize();
  return CreateTensor(impl_->name, impl_->type, impl_->shape, impl_->data, bytes);
}

std::string MSTensor::Name() const { return impl_ ? impl_->name : std::string(); }
void MSTensor::SetTensorName(const std::string &name) {
  if (impl_) impl_->name = name;
}
enum DataType MSTensor::DataType() const { return impl_ ? impl_->type : DataType::kTypeUnknown; }
void MSTensor::SetDataType(enum DataType data_type) {
  if (impl_) impl_->type = data_type;
}

const std::vector<int64_t> &MSTensor::Shape() const {
  static const std::vector<int64_t> kNone;
  return impl_ ? impl_->shape : kNone;
}
void MSTensor::SetShape(const std::vector<int64_t> &shape) {
  if (impl_) impl_->shape = shape;
}
enum Format MSTensor::format() const { return impl_ ? impl_->format : DEFAULT_FORMAT; }
void MSTensor::SetFormat(enum Format format) {
  if (impl_) impl_->format = format;
}

int64_t MSTensor::ElementNum() const {
  if (!impl_) return 0;
  int64_t n = 1;
  for (int64_t d : impl_->shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

size_t MSTensor::DataSize() const {
  int64_t n = ElementNum();
  return n < 0 ? 0 : static_cast<size_t>(n) * DataTypeSize(DataType());
}

std::shared_ptr<const void> MSTensor::Data() const {
  if (!impl_ || impl_->data == nullptr) return nullptr;
  return std::shared_ptr<const void>(impl_, impl_->data);  // shares ownership of the tensor, points at its data
}

void *MSTensor::MutableData() {
  if (!impl_) return nullptr;
  size_t bytes = DataSize();
  if (bytes == 0) return impl_->data;
  if (impl_->data == nullptr || (impl_->own && impl_->capacity < bytes)) {
    void *fresh = std::malloc(bytes);
    if (fresh == nullptr) return nullptr;
    impl_->Release();
    impl_->data = fresh;
    impl_->own = true;
    impl_->capacity = bytes;
  }
  return impl_->data;
}

void MSTensor::SetData(void *data, bool own_data) {
  if (!impl_) return;
  if (data != impl_->data) impl_->Release();  // the same buffer again: only who owns it changes
  impl_->data = data;
  impl_->own = own_data && data != nullptr;
  // the caller's buffer holds DataSize() bytes of the shape it has now (what MindSpore Lite reads too)
  impl_->capacity = data == nullptr ? 0 : DataSize();
}

void MSTensor::SetDeviceData(void *data) {
  if (impl_) impl_->device_data = data;
}

void *MSTensor::GetDeviceData() { return impl_ ? impl_->device_data : nullptr; }

void *TensorAccess::DeviceData(const MSTensor &tensor) { return tensor.impl_ ? tensor.impl_->device_data : nullptr; }

size_t TensorAccess::Capacity(const MSTensor &tensor) { return tensor.impl_ ? tensor.impl_->capacity : 0; }

bool TensorAccess::Fill(MSTensor *tensor, enum DataType type, const std::vector<int64_t> &shape, const char *bytes,
                        size_t size) {
  MSTensor::Impl *impl = tensor->impl_.get();
  if (impl == nullptr) return false;
  impl->type = type;
  impl->shape = shape;
  if (impl->data == nullptr || impl->capacity < size) {  // no buffer, or one too small for this answer
    void *fresh = std::malloc(size == 0 ? 1 : size);
    if (fresh == nullptr) return false;
    impl->Release();
    impl->data = fresh;
    impl->own = true;
    impl->capacity = size;
  }
  if (size > 0) std::memcpy(impl->data, bytes, size);
  return true;
}

}  // namespace mslite_triton
