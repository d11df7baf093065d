// The little JSON this client reads (model metadata and config, infer answers, error bodies) and writes.
#ifndef MSLITE_TRITON_SRC_JSON_H_
#define MSLITE_TRITON_SRC_JSON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mslite_triton {
namespace json {

struct Value {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string, or a number as written (int64 values beyond a double's 53 bits stay exact)
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;

  // The member `key` of an object; nullptr when absent or not an object.
  const Value *Find(const std::string &key) const;
  // A number, or a string holding one (protobuf's JSON writes int64 fields as strings); `otherwise` if neither.
  int64_t AsInt(int64_t otherwise = 0) const;
};

// Parses `size` bytes; false with *error set on bad JSON or nesting deeper than 64.
bool Parse(const char *text, size_t size, Value *out, std::string *error);

// `s` as a JSON string literal, quotes included.
std::string Quote(const std::string &s);

}  // namespace json
}  // namespace mslite_triton

#endif  // MSLITE_TRITON_SRC_JSON_H_
