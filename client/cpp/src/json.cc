#include "json.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace mslite_triton {
namespace json {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const char *text, size_t size) : p_(text), end_(text + size) {}

  bool Document(Value *out, std::string *error) {
    if (!Parse(out, 0) || (SkipSpace(), p_ != end_)) {
      *error = error_.empty() ? "trailing characters" : error_;
      return false;
    }
    return true;
  }

 private:
  void SkipSpace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool Fail(const char *why) {
    if (error_.empty()) error_ = why;
    return false;
  }

  bool Literal(const char *word) {
    for (; *word != '\0'; ++word, ++p_) {
      if (p_ == end_ || *p_ != *word) return Fail("bad literal");
    }
    return true;
  }

  bool Parse(Value *out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    SkipSpace();
    if (p_ == end_) return Fail("unexpected end");
    switch (*p_) {
      case '{':
        return Object(out, depth);
      case '[':
        return Array(out, depth);
      case '"':
        out->kind = Value::kString;
        return String(&out->text);
      case 't':
        out->kind = Value::kBool;
        out->boolean = true;
        return Literal("true");
      case 'f':
        out->kind = Value::kBool;
        return Literal("false");
      case 'n':
        out->kind = Value::kNull;
        return Literal("null");
      default:
        return Number(out);
    }
  }

  bool Object(Value *out, int depth) {
    out->kind = Value::kObject;
    ++p_;
    SkipSpace();
    if (p_ != end_ && *p_ == '}') return ++p_, true;
    while (true) {
      SkipSpace();
      std::string key;
      if (p_ == end_ || *p_ != '"' || !String(&key)) return Fail("expected a member name");
      SkipSpace();
      if (p_ == end_ || *p_ != ':') return Fail("expected ':'");
      ++p_;
      out->members.emplace_back(std::move(key), Value());
      if (!Parse(&out->members.back().second, depth + 1)) return false;
      SkipSpace();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ != end_ && *p_ == '}') return ++p_, true;
      return Fail("expected ',' or '}'");
    }
  }

  bool Array(Value *out, int depth) {
    out->kind = Value::kArray;
    ++p_;
    SkipSpace();
    if (p_ != end_ && *p_ == ']') return ++p_, true;
    while (true) {
      out->items.emplace_back();
      if (!Parse(&out->items.back(), depth + 1)) return false;
      SkipSpace();
      if (p_ != end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ != end_ && *p_ == ']') return ++p_, true;
      return Fail("expected ',' or ']'");
    }
  }

  bool Number(Value *out) {
    const char *start = p_;
    while (p_ != end_ && (std::isdigit(static_cast<unsigned char>(*p_)) || *p_ == '-' || *p_ == '+' || *p_ == '.' ||
                          *p_ == 'e' || *p_ == 'E')) {
      ++p_;
    }
    if (p_ == start) return Fail("unexpected character");
    out->kind = Value::kNumber;
    out->text.assign(start, p_);
    char *stop = nullptr;
    out->number = std::strtod(out->text.c_str(), &stop);
    if (stop == nullptr || *stop != '\0') return Fail("bad number");
    return true;
  }

  static void AppendUtf8(unsigned code, std::string *s) {
    if (code < 0x80) {
      s->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (code >> 6)));
      s->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (code >> 12)));
      s->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (code >> 18)));
      s->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  bool Hex4(unsigned *code) {
    if (end_ - p_ < 4) return Fail("short \\u escape");
    *code = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      char c = *p_;
      unsigned digit = c >= '0' && c <= '9' ? static_cast<unsigned>(c - '0')
                       : c >= 'a' && c <= 'f' ? static_cast<unsigned>(c - 'a' + 10)
                       : c >= 'A' && c <= 'F' ? static_cast<unsigned>(c - 'A' + 10)
                                              : 16u;
      if (digit == 16) return Fail("bad \\u escape");
      *code = *code * 16 + digit;
    }
    return true;
  }

  bool String(std::string *s) {
    ++p_;  // the opening quote
    while (p_ != end_ && *p_ != '"') {
      if (*p_ != '\\') {
        s->push_back(*p_++);
        continue;
      }
      if (++p_ == end_) break;
      char e = *p_++;
      switch (e) {
        case 'n': s->push_back('\n'); break;
        case 't': s->push_back('\t'); break;
        case 'r': s->push_back('\r'); break;
        case 'b': s->push_back('\b'); break;
        case 'f': s->push_back('\f'); break;
        case 'u': {
          unsigned code = 0;
          if (!Hex4(&code)) return false;
          if (code >= 0xD800 && code < 0xDC00 && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
            p_ += 2;
            unsigned low = 0;
            if (!Hex4(&low)) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(code, s);
          break;
        }
        default: s->push_back(e);  // \" \\ \/
      }
    }
    if (p_ == end_) return Fail("unterminated string");
    ++p_;
    return true;
  }

  const char *p_;
  const char *end_;
  std::string error_;
};

}  // namespace

const Value *Value::Find(const std::string &key) const {
  for (const auto &member : members) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

int64_t Value::AsInt(int64_t otherwise) const {
  if (kind != kNumber && kind != kString) return otherwise;
  errno = 0;
  char *stop = nullptr;
  long long v = std::strtoll(text.c_str(), &stop, 10);
  if (errno != 0 || stop == text.c_str() || *stop != '\0') return otherwise;
  return static_cast<int64_t>(v);
}

bool Parse(const char *text, size_t size, Value *out, std::string *error) {
  *out = Value();
  return Parser(text, size).Document(out, error);
}

std::string Quote(const std::string &s) {
  static const char kHex[] = "0123456789abcdef";
  std::string q = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (u < 0x20) {
      q += "\\u00";
      q += kHex[u >> 4];
      q += kHex[u & 15];
    } else {
      q += c;
    }
  }
  return q + "\"";
}

}  // namespace json
}  // namespace mslite_triton
