// The one error table of the C++ client: an HTTP answer that is not 200 -> MindSpore Lite's Status.
#ifndef MSLITE_TRITON_SRC_SERVER_ERRORS_H_
#define MSLITE_TRITON_SRC_SERVER_ERRORS_H_

#include <string>

#include "mslite_triton/status.h"

namespace mslite_triton {

// The status for HTTP `code` with answer `body` (as the Python and Java clients classify them), its message
// the server's reason; `otherwise` when no rule matches.
Status Classify(long code, const std::string &body, enum StatusCode otherwise);

// The clients' one wording for a device the server lacks ("GPU 0 is not available on the server (the GPUs it
// can use: none)"), from Triton's refusal of a GPU instance group; "" for other messages. The Python client's
// _error_table.device_missing and the Java client's KServeHttp.deviceMissing say the same.
std::string DeviceMissing(const std::string &message);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_SERVER_ERRORS_H_
