#include "endpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include "protocol.h"

namespace mslite_triton {

std::string Encode(const std::string &name) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

bool SplitUrl(const std::string &url, std::string *scheme, std::string *host, int *port) {
  size_t sep = url.find("://");
  if (sep == std::string::npos) return false;
  *scheme = url.substr(0, sep);
  std::string rest = url.substr(sep + 3);
  rest = rest.substr(0, rest.find('/'));
  size_t colon = rest.rfind(':');
  *port = -1;
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    std::string digits = rest.substr(colon + 1);
    if (digits.empty() || digits.size() > 5 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
    *port = std::stoi(digits);
    rest = rest.substr(0, colon);
  }
  *host = rest;
  return (*scheme == "http" || *scheme == "https") && !host->empty();
}

std::string AdminKey(const std::string &url) {
  const char *env = std::getenv(protocol::ADMIN_KEY_ENV);
  if (env != nullptr && *env != '\0') return env;
  std::string scheme, host;
  int port = -1;
  if (!SplitUrl(url, &scheme, &host, &port) || port < 0) return "";
  const char *dir = std::getenv(protocol::KEY_DIR_ENV);
  const char *home = std::getenv("HOME");
  std::string keys = dir != nullptr && *dir != '\0' ? dir : std::string(home ? home : "") + "/.mslite-triton/keys";
  // A key file outlives a server killed abruptly, and its port may be another account's by then: its key
  // goes only to a loopback port every listener of which belongs to the file's owner.
  if (host == "localhost") host = "127.0.0.1";
  if (host != "127.0.0.1" && host != "[::1]") return "";
  std::ifstream in(keys + "/" + host + "_" + std::to_string(port) + ".key");
  struct stat st;
  if (!in || stat((keys + "/" + host + "_" + std::to_string(port) + ".key").c_str(), &st) != 0) return "";
  std::set<unsigned> owners = ListenerUids(port);
  if (owners.size() != 1 || *owners.begin() != st.st_uid) return "";
  std::string key;
  std::getline(in, key);
  size_t end = key.find_last_not_of(" \t\r\n");
  return end == std::string::npos ? "" : key.substr(0, end + 1);
}

std::set<unsigned> ListenerUids(int port) {
  // local addresses (as /proc/net/tcp* write them) through which a connection to loopback may arrive
  static const char *kLoopback[] = {"0100007F", "00000000", "00000000000000000000000001000000",
                                    "00000000000000000000000000000000", "0000000000000000FFFF00000100007F"};
  std::set<unsigned> uids;
  for (const char *table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string row;
    std::getline(in, row);  // the header
    while (std::getline(in, row)) {
      std::istringstream fields(row);
      std::string slot, local, remote, state, queues, timer, retransmits, uid;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid)) continue;
      size_t colon = local.find(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: listening
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      std::string address = local.substr(0, colon);
      std::transform(address.begin(), address.end(), address.begin(), ::toupper);
      for (const char *loopback : kLoopback) {
        if (address == loopback) uids.insert(static_cast<unsigned>(std::stoul(uid)));
      }
    }
  }
  return uids;
}

}  // namespace mslite_triton
