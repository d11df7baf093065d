// Where the server is and how to name things on it: URLs, the admin key, model names in paths.
#ifndef MSLITE_TRITON_SRC_ENDPOINT_H_
#define MSLITE_TRITON_SRC_ENDPOINT_H_

#include <set>
#include <string>

namespace mslite_triton {

// scheme, host and port (-1 when absent) of `url`; false unless it is http(s)://host[:port][/...].
bool SplitUrl(const std::string &url, std::string *scheme, std::string *host, int *port);

// The admin key for `url`: MSLITE_TRITON_KEY, else the key file the server wrote for its host and port
// ($MSLITE_TRITON_KEY_DIR or ~/.mslite-triton/keys, <host>_<port>.key) when the port is on loopback and
// every listener on it belongs to the file's owner (ListenerUids), else "".
std::string AdminKey(const std::string &url);

// The accounts owning a socket that listens on `port` at a loopback or wildcard address (/proc/net/tcp, tcp6).
std::set<unsigned> ListenerUids(int port);

// `name` percent-encoded for a URL path.
std::string Encode(const std::string &name);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_ENDPOINT_H_
