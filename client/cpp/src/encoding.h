// Base64 (Triton's load API takes model files base64 in JSON) and SHA-256 (the upload's model name).
#ifndef MSLITE_TRITON_SRC_ENCODING_H_
#define MSLITE_TRITON_SRC_ENCODING_H_

#include <cstddef>
#include <initializer_list>
#include <string>

namespace mslite_triton {

std::string Base64(const std::string &bytes);

// SHA-256 of the concatenation of `parts`, as 64 lowercase hex digits. Written here so the library needs
// nothing but libcurl.
std::string Sha256Hex(std::initializer_list<const std::string *> parts);

}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_ENCODING_H_
