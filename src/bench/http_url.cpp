#include "bench/http_url.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace optimate::bench {

HttpUrl parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    fail(ErrorCode::kUnsupported, "--url {}: https is not supported; benchmark the server over plain http "
         "(or through a local TLS-terminating proxy)", url);
  if (url.rfind(scheme, 0) != 0) fail(ErrorCode::kInvalidArgument, "--url {}: expected http://HOST[:PORT][/PATH]", url);
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  HttpUrl u;
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.prefix = rest.substr(slash);
  if (authority.find('@') != std::string::npos)
    fail(ErrorCode::kInvalidArgument, "--url {}: credentials in the URL are not supported; use --api-key", url);
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) fail(ErrorCode::kInvalidArgument, "--url {}: unterminated IPv6 address", url);
    u.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') fail(ErrorCode::kInvalidArgument, "--url {}: bad address", url);
    if (!after.empty()) u.port = after.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) fail(ErrorCode::kInvalidArgument, "--url {}: no host", url);
  if (u.port.empty()) u.port = "80";
  const bool numeric = std::all_of(u.port.begin(), u.port.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!numeric || u.port.size() > 5 || std::stoi(u.port) < 1 || std::stoi(u.port) > 65535)
    fail(ErrorCode::kInvalidArgument, "--url {}: port '{}' is not a number in 1..65535", url, u.port);
  u.host_header = authority;
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (u.prefix.size() >= 3 && u.prefix.compare(u.prefix.size() - 3, 3, "/v1") == 0)
    u.prefix.resize(u.prefix.size() - 3);
  if (u.prefix.find_first_of("?#") != std::string::npos)
    fail(ErrorCode::kInvalidArgument, "--url {}: a query or fragment has no meaning here", url);
  return u;
}

}  // namespace optimate::bench
