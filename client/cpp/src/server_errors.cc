#include "server_errors.h"

#include <cctype>

#include "json.h"
#include "protocol.h"

namespace mslite_triton {
namespace {

std::string Lower(std::string s) {
  for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The server's reason without a Python traceback ("\n  At:\n ...") or the model-author advice that some
// Triton errors carry.
std::string Reason(const std::string &body) {
  std::string message = body;
  json::Value parsed;
  std::string ignored;
  if (json::Parse(body.data(), body.size(), &parsed, &ignored)) {
    const json::Value *error = parsed.Find("error");
    if (error != nullptr && error->kind == json::Value::kString) message = error->text;
  }
  // advice Triton appends for model authors (about the model config), not for the caller of predict
  size_t advice = message.find("NOTE: Setting a non-zero max_batch_size");
  if (advice != std::string::npos) message.erase(advice);
  size_t at = message.find("At:\n");
  if (at != std::string::npos) {
    size_t cut = message.find_last_not_of(" \t\n", at == 0 ? 0 : at - 1);
    message = cut == std::string::npos ? "" : message.substr(0, cut + 1);
  }
  size_t a = message.find_first_not_of(" \t\r\n");
  return a == std::string::npos ? "" : message.substr(a, message.find_last_not_of(" \t\r\n") - a + 1);
}

}  // namespace

std::string DeviceMissing(const std::string &message) {
  static const std::string kRefused = "invalid or unsupported gpu id ";
  const std::string lower = Lower(message);
  size_t at = lower.find(kRefused);
  if (at == std::string::npos) return "";
  size_t start = at + kRefused.size();
  size_t end = start;
  while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
  if (end == start) return "";
  std::string usable;
  size_t list = lower.find("are:", end);
  if (list != std::string::npos) {
    std::string digits;
    for (size_t i = list + 4; i <= message.size(); ++i) {
      char c = i < message.size() ? message[i] : ';';
      if (std::isdigit(static_cast<unsigned char>(c))) {
        digits += c;
      } else if (c == ',' || c == ' ') {
        if (!digits.empty()) usable += (usable.empty() ? "" : ", ") + digits;
        digits.clear();
      } else {
        if (!digits.empty()) usable += (usable.empty() ? "" : ", ") + digits;
        break;
      }
    }
  }
  return "GPU " + message.substr(start, end - start) + " is not available on the server (the GPUs it can use: " +
         (usable.empty() ? "none" : usable) + ")";
}

Status Classify(long code, const std::string &body, enum StatusCode otherwise) {
  std::string message = Reason(body);
  std::string lower = Lower(message);
  enum StatusCode status = otherwise;
  if (code == 503 && (lower.find("kliteservicedeny") != std::string::npos ||
                      lower.find("maximum queue size") != std::string::npos ||
                      (lower.find("queue") != std::string::npos && lower.find("full") != std::string::npos))) {
    status = kLiteServiceDeny;
  } else if (code == 403 || lower.find("is restricted") != std::string::npos) {
    status = kLiteError;
    message = "permission denied (the model-control API needs the admin key: set " +
              std::string(protocol::ADMIN_KEY_ENV) + "): " + message;
  } else if (code == 404 || lower.find("unknown model") != std::string::npos ||
             lower.find("is not found") != std::string::npos) {
    status = kLiteError;
    message = "model not found: " + message;
  } else if (!DeviceMissing(message).empty()) {
    return Status(kLiteNotSupport, DeviceMissing(message));
  } else if (code == 400 && otherwise == kLiteError) {
    status = kLiteInputTensorError;
  }
  return Status(status, message + " (HTTP " + std::to_string(code) + ")");
}

}  // namespace mslite_triton
