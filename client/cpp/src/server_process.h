// Where the server is: the context's URL, MSLITE_TRITON_URL, else a `mslite-triton serve` this process starts
// on free loopback ports (once; again only if it died) and stops when it exits.
#ifndef MSLITE_TRITON_SRC_SERVER_PROCESS_H_
#define MSLITE_TRITON_SRC_SERVER_PROCESS_H_

#include <string>

#include "mslite_triton/status.h"

namespace mslite_triton {

// The server's URL and the admin key to send it ("" when there is none). `explicit_url`: the context's.
// kLiteParamInvalid: no URL and MSLITE_TRITON_AUTOSTART=0; kLiteError: the command is not installed or the
// server did not start (its reason).
Status ResolveServer(const std::string &explicit_url, std::string *url, std::string *key);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_SERVER_PROCESS_H_
