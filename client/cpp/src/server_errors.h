// The one error table of the C++ client: an HTTP answer that is not 200 -> MindSpore Lite's Status.
#ifndef MSLITE_TRITON_SRC_SERVER_ERRORS_H_
#define MSLITE_TRITON_SRC_SERVER_ERRORS_H_

#include <string>

#include "mslite_triton/status.h"

namespace mslite_triton {

// The status for HTTP `code` with answer `body` (as the Python and Java clients classify them), its message
// the server's reason; `otherwise` when no rule matches.
Status Classify(long code, const std::string &body, enum StatusCode otherwise);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_SERVER_ERRORS_H_
