// Limits, timeouts and cross-origin rules of the HTTP front end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace optimate::server {

// Cross-origin resource sharing, with vLLM's flags and defaults (--allowed-origins,
// --allowed-methods, --allowed-headers, --allow-credentials): any origin may call the API,
// without credentials. "*" in a list allows everything.
struct CorsOptions {
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

struct HttpOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0 picks a free port (tests)
  int num_threads = 2;   // io_context threads; connections are not tied to threads
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  size_t max_header_bytes = 16u << 10;  // larger headers get 431
  // A request must arrive completely within this time after its first byte (or after the
  // previous response, for keep-alive); a partial request then gets 408, an idle one is closed.
  double read_timeout_s = 30.0;
  // A client that accepts no bytes for this long is dropped.
  double write_timeout_s = 60.0;
  // A streaming client this far behind is dropped and its request aborted, so a slow reader
  // costs bounded memory and never stalls the engine.
  size_t max_pending_write_bytes = 4u << 20;
  CorsOptions cors;
  // One line per answered request on stderr (--access-log).
  bool access_log = false;
};

}  // namespace optimate::server
