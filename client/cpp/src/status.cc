#include "mslite_triton/status.h"

#include <cstdio>

namespace mslite_triton {

Status::Status(enum StatusCode status_code, const std::string &status_msg)
    : code_(status_code), message_(status_msg) {}

Status::Status(enum StatusCode code, int line_of_code, const char *file_name, const std::string &extra)
    : code_(code), message_(extra), line_of_code_(line_of_code), file_name_(file_name == nullptr ? "" : file_name) {}

std::string Status::ToString() const {
  return message_.empty() ? CodeAsString(code_) : CodeAsString(code_) + ": " + message_;
}

std::string Status::SetErrDescription(const std::string &err_description) {
  message_ = err_description;
  return ToString();
}

std::ostream &operator<<(std::ostream &os, const Status &s) { return os << s.ToString(); }

std::string Status::CodeAsString(enum StatusCode c) {
  switch (c) {
#define MSLITE_TRITON_CODE(name) \
  case name:                     \
    return #name;
    MSLITE_TRITON_CODE(kSuccess)
    MSLITE_TRITON_CODE(kCoreFailed)
    MSLITE_TRITON_CODE(kMEFailed)
    MSLITE_TRITON_CODE(kMEInvalidInput)
    MSLITE_TRITON_CODE(kMCFailed)
    MSLITE_TRITON_CODE(kMCDeviceError)
    MSLITE_TRITON_CODE(kMCInvalidInput)
    MSLITE_TRITON_CODE(kMCInvalidArgs)
    MSLITE_TRITON_CODE(kLiteError)
    MSLITE_TRITON_CODE(kLiteNullptr)
    MSLITE_TRITON_CODE(kLiteParamInvalid)
    MSLITE_TRITON_CODE(kLiteNoChange)
    MSLITE_TRITON_CODE(kLiteSuccessExit)
    MSLITE_TRITON_CODE(kLiteMemoryFailed)
    MSLITE_TRITON_CODE(kLiteNotSupport)
    MSLITE_TRITON_CODE(kLiteThreadPoolError)
    MSLITE_TRITON_CODE(kLiteUninitializedObj)
    MSLITE_TRITON_CODE(kLiteFileError)
    MSLITE_TRITON_CODE(kLiteServiceDeny)
    MSLITE_TRITON_CODE(kLiteModelRebuild)
    MSLITE_TRITON_CODE(kLiteOutOfTensorRange)
    MSLITE_TRITON_CODE(kLiteInputTensorError)
    MSLITE_TRITON_CODE(kLiteReentrantError)
    MSLITE_TRITON_CODE(kLiteGraphFileError)
    MSLITE_TRITON_CODE(kLiteNotFindOp)
    MSLITE_TRITON_CODE(kLiteInvalidOpName)
    MSLITE_TRITON_CODE(kLiteInvalidOpAttr)
    MSLITE_TRITON_CODE(kLiteOpExecuteFailure)
    MSLITE_TRITON_CODE(kLiteFormatError)
    MSLITE_TRITON_CODE(kLiteInferError)
    MSLITE_TRITON_CODE(kLiteInferInvalid)
    MSLITE_TRITON_CODE(kLiteInputParamInvalid)
#undef MSLITE_TRITON_CODE
  }
  char hex[32];
  std::snprintf(hex, sizeof(hex), "kUnknownCode(0x%08x)", static_cast<unsigned>(c));
  return hex;
}

}  // namespace mslite_triton
