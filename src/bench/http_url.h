// The address of a server under benchmark: "http://host[:port][/prefix]".
#pragma once

#include <string>

namespace optimate::bench {

struct HttpUrl {
  std::string host;    // without brackets for IPv6 literals
  std::string port;    // "80" when absent
  std::string prefix;  // path before /v1/..., without a trailing '/'; "" for the root
  std::string host_header;  // host[:port] as the Host header carries it
};

// Accepts the server root or the OpenAI base URL ending in /v1 (both name the same server).
// Error(kUnsupported) for https, Error(kInvalidArgument) for anything else that is not an
// http URL.
HttpUrl parse_http_url(const std::string& url);

}  // namespace optimate::bench
