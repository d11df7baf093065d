// MindSpore Lite's mindspore::Status and its StatusCode numbers (include/api/status.h), under mslite_triton.
#ifndef MSLITE_TRITON_STATUS_H_
#define MSLITE_TRITON_STATUS_H_

#include <cstdint>
#include <ostream>
#include <string>

namespace mslite_triton {

enum CompCode : uint32_t {
  kCore = 0x00000000u,
  kMD = 0x10000000u,
  kME = 0x20000000u,
  kMC = 0x30000000u,
  kLite = 0xF0000000u,
};

// The same numbers as MindSpore Lite's, so code that compares or logs them keeps its meaning.
enum StatusCode : uint32_t {
  kSuccess = 0,
  kCoreFailed = kCore | 0x1,
  kMEFailed = kME | 0x1,
  kMEInvalidInput = kME | 0x2,
  kMCFailed = kMC | 0x1,
  kMCDeviceError = kMC | 0x2,
  kMCInvalidInput = kMC | 0x3,
  kMCInvalidArgs = kMC | 0x4,
  kLiteError = kLite | (0x0FFFFFFF & -1),
  kLiteNullptr = kLite | (0x0FFFFFFF & -2),
  kLiteParamInvalid = kLite | (0x0FFFFFFF & -3),
  kLiteNoChange = kLite | (0x0FFFFFFF & -4),
  kLiteSuccessExit = kLite | (0x0FFFFFFF & -5),
  kLiteMemoryFailed = kLite | (0x0FFFFFFF & -6),
  kLiteNotSupport = kLite | (0x0FFFFFFF & -7),
  kLiteThreadPoolError = kLite | (0x0FFFFFFF & -8),
  kLiteUninitializedObj = kLite | (0x0FFFFFFF & -9),
  kLiteFileError = kLite | (0x0FFFFFFF & -10),
  kLiteServiceDeny = kLite | (0x0FFFFFFF & -11),
  kLiteModelRebuild = kLite | (0x0FFFFFFF & -12),
  kLiteOutOfTensorRange = kLite | (0x0FFFFFFF & -100),
  kLiteInputTensorError = kLite | (0x0FFFFFFF & -101),
  kLiteReentrantError = kLite | (0x0FFFFFFF & -102),
  kLiteGraphFileError = kLite | (0x0FFFFFFF & -200),
  kLiteNotFindOp = kLite | (0x0FFFFFFF & -300),
  kLiteInvalidOpName = kLite | (0x0FFFFFFF & -301),
  kLiteInvalidOpAttr = kLite | (0x0FFFFFFF & -302),
  kLiteOpExecuteFailure = kLite | (0x0FFFFFFF & -303),
  kLiteFormatError = kLite | (0x0FFFFFFF & -400),
  kLiteInferError = kLite | (0x0FFFFFFF & -500),
  kLiteInferInvalid = kLite | (0x0FFFFFFF & -501),
  kLiteInputParamInvalid = kLite | (0x0FFFFFFF & -600),
};

// A code and the reason behind it. ToString() is "<code name>: <reason>" (the server's reason for server
// errors, never its paths or tracebacks), so `std::cerr << status` says what went wrong.
class Status {
 public:
  Status() = default;
  Status(enum StatusCode status_code, const std::string &status_msg = "");  // NOLINT: implicit, as MindSpore's
  Status(enum StatusCode code, int line_of_code, const char *file_name, const std::string &extra = "");

  enum StatusCode StatusCode() const { return code_; }
  std::string ToString() const;
  int GetLineOfCode() const { return line_of_code_; }
  const std::string &GetFileName() const { return file_name_; }
  const std::string &GetErrDescription() const { return message_; }
  std::string SetErrDescription(const std::string &err_description);
  void SetStatusMsg(const std::string &status_msg) { message_ = status_msg; }

  friend std::ostream &operator<<(std::ostream &os, const Status &s);

  bool operator==(const Status &other) const { return code_ == other.code_; }
  bool operator==(enum StatusCode other_code) const { return code_ == other_code; }
  bool operator!=(const Status &other) const { return code_ != other.code_; }
  bool operator!=(enum StatusCode other_code) const { return code_ != other_code; }
  explicit operator bool() const { return code_ == kSuccess; }
  explicit operator enum StatusCode() const { return code_; }
  bool IsOk() const { return code_ == kSuccess; }
  bool IsError() const { return code_ != kSuccess; }

  static Status OK() { return Status(kSuccess); }
  // "kLiteServiceDeny" for kLiteServiceDeny; "kUnknownCode(0x...)" for a number this library does not name.
  static std::string CodeAsString(enum StatusCode c);

 private:
  enum StatusCode code_ = kSuccess;
  std::string message_;
  int line_of_code_ = -1;
  std::string file_name_;
};

}  // namespace mslite_triton

// MindSpore Lite's names, so a program written for it compiles with only its include lines changed.
namespace mindspore {
using mslite_triton::CompCode;
using mslite_triton::Status;
using mslite_triton::StatusCode;
using mslite_triton::kCore;
using mslite_triton::kMD;
using mslite_triton::kME;
using mslite_triton::kMC;
using mslite_triton::kLite;
using mslite_triton::kSuccess;
using mslite_triton::kCoreFailed;
using mslite_triton::kMEFailed;
using mslite_triton::kMEInvalidInput;
using mslite_triton::kMCFailed;
using mslite_triton::kMCDeviceError;
using mslite_triton::kMCInvalidInput;
using mslite_triton::kMCInvalidArgs;
using mslite_triton::kLiteError;
using mslite_triton::kLiteNullptr;
using mslite_triton::kLiteParamInvalid;
using mslite_triton::kLiteNoChange;
using mslite_triton::kLiteSuccessExit;
using mslite_triton::kLiteMemoryFailed;
using mslite_triton::kLiteNotSupport;
using mslite_triton::kLiteThreadPoolError;
using mslite_triton::kLiteUninitializedObj;
using mslite_triton::kLiteFileError;
using mslite_triton::kLiteServiceDeny;
using mslite_triton::kLiteModelRebuild;
using mslite_triton::kLiteOutOfTensorRange;
using mslite_triton::kLiteInputTensorError;
using mslite_triton::kLiteReentrantError;
using mslite_triton::kLiteGraphFileError;
using mslite_triton::kLiteNotFindOp;
using mslite_triton::kLiteInvalidOpName;
using mslite_triton::kLiteInvalidOpAttr;
using mslite_triton::kLiteOpExecuteFailure;
using mslite_triton::kLiteFormatError;
using mslite_triton::kLiteInferError;
using mslite_triton::kLiteInferInvalid;
using mslite_triton::kLiteInputParamInvalid;
}  // namespace mindspore

#endif  // MSLITE_TRITON_STATUS_H_
