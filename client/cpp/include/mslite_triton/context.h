// MindSpore Lite's mindspore::Context and its device infos (include/api/context.h), plus where the server is.
#ifndef MSLITE_TRITON_CONTEXT_H_
#define MSLITE_TRITON_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mslite_triton {

enum DeviceType {
  kCPU = 0,
  kGPU,
  kKirinNPU,
  kAscend,
  kAscend910,
  kAscend310,
  kCustomDevice,
  kAllDevice,
  kInvalidDeviceType = 100,
};

// One device of a Context. The first device in the list decides where the server runs the workers:
// CPU or GPU (with its device id); Ascend and other devices are refused at Init.
class DeviceInfoContext : public std::enable_shared_from_this<DeviceInfoContext> {
 public:
  DeviceInfoContext() = default;
  virtual ~DeviceInfoContext() = default;
  virtual enum DeviceType GetDeviceType() const = 0;

  template <class T>
  std::shared_ptr<T> Cast() {
    return std::dynamic_pointer_cast<T>(shared_from_this());
  }

  std::string GetProvider() const { return provider_; }
  void SetProvider(const std::string &provider) { provider_ = provider; }
  std::string GetProviderDevice() const { return provider_device_; }
  void SetProviderDevice(const std::string &device) { provider_device_ = device; }
  void SetEnableFP16(bool is_fp16) { enable_fp16_ = is_fp16; }
  bool GetEnableFP16() const { return enable_fp16_; }

 private:
  std::string provider_;
  std::string provider_device_;
  bool enable_fp16_ = false;
};

class CPUDeviceInfo : public DeviceInfoContext {
 public:
  enum DeviceType GetDeviceType() const override { return kCPU; }
};

class GPUDeviceInfo : public DeviceInfoContext {
 public:
  enum DeviceType GetDeviceType() const override { return kGPU; }
  void SetDeviceID(uint32_t device_id) { device_id_ = device_id; }
  uint32_t GetDeviceID() const { return device_id_; }
  void SetPrecisionMode(const std::string &mode) { precision_mode_ = mode; }
  std::string GetPrecisionMode() const { return precision_mode_; }
  // This process's rank and the group's size as the MPI launcher (mpirun) gives them; 0 and 1 without one.
  int GetRankID() const;
  int GetGroupSize() const;

 private:
  uint32_t device_id_ = 0;
  std::string precision_mode_;
};

// Kept so ported code compiles; the server has no Ascend devices, and Init says so.
class AscendDeviceInfo : public DeviceInfoContext {
 public:
  enum DeviceType GetDeviceType() const override { return kAscend; }
  void SetDeviceID(uint32_t device_id) { device_id_ = device_id; }
  uint32_t GetDeviceID() const { return device_id_; }
  void SetPrecisionMode(const std::string &mode) { precision_mode_ = mode; }
  std::string GetPrecisionMode() const { return precision_mode_; }
  void SetRankID(uint32_t rank_id) { rank_id_ = rank_id; }
  uint32_t GetRankID() const { return rank_id_; }

 private:
  uint32_t device_id_ = 0;
  uint32_t rank_id_ = 0;
  std::string precision_mode_;
};

// Threads per worker and the device list, as MindSpore Lite's; SetServerUrl is this library's own: the
// server's KServe v2 HTTP address (http://host:port). Without it, MSLITE_TRITON_URL names the server.
class Context {
 public:
  Context() = default;

  void SetThreadNum(int32_t thread_num) { thread_num_ = thread_num < 0 ? 0 : thread_num; }
  int32_t GetThreadNum() const { return thread_num_; }
  void SetInterOpParallelNum(int32_t parallel_num) { inter_op_ = parallel_num < 0 ? 0 : parallel_num; }
  int32_t GetInterOpParallelNum() const { return inter_op_; }
  // 0 no binding, 1 big cores first, 2 middle cores first; other values mean 0.
  void SetThreadAffinity(int mode) { affinity_mode_ = mode < 0 || mode > 2 ? 0 : mode; }
  int GetThreadAffinityMode() const { return affinity_mode_; }
  // Kept for ported code; the server's workers do not bind to a core list.
  void SetThreadAffinity(const std::vector<int> &core_list) { core_list_ = core_list; }
  std::vector<int32_t> GetThreadAffinityCoreList() const { return core_list_; }
  void SetEnableParallel(bool is_parallel) { enable_parallel_ = is_parallel; }
  bool GetEnableParallel() const { return enable_parallel_; }
  std::vector<std::shared_ptr<DeviceInfoContext>> &MutableDeviceInfo() { return devices_; }

  void SetServerUrl(const std::string &url) { server_url_ = url; }
  std::string GetServerUrl() const { return server_url_; }

 private:
  int32_t thread_num_ = 0;  // 0: MindSpore Lite's default rule, applied at upload
  int32_t inter_op_ = 0;
  int affinity_mode_ = 0;
  std::vector<int32_t> core_list_;
  bool enable_parallel_ = false;
  std::vector<std::shared_ptr<DeviceInfoContext>> devices_;
  std::string server_url_;
};

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::AscendDeviceInfo;
using mslite_triton::Context;
using mslite_triton::CPUDeviceInfo;
using mslite_triton::DeviceInfoContext;
using mslite_triton::DeviceType;
using mslite_triton::GPUDeviceInfo;
using mslite_triton::kAllDevice;
using mslite_triton::kAscend;
using mslite_triton::kAscend310;
using mslite_triton::kAscend910;
using mslite_triton::kCPU;
using mslite_triton::kCustomDevice;
using mslite_triton::kGPU;
using mslite_triton::kInvalidDeviceType;
using mslite_triton::kKirinNPU;
}  // namespace mindspore

#endif  // MSLITE_TRITON_CONTEXT_H_
