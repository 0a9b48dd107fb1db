// Ids of responses, engine requests and tool calls.
#pragma once

#include <string>
#include <string_view>

namespace optimate::server {

// `prefix` + 32 random hex digits: the shape of vLLM's ids ("chatcmpl-...", "cmpl-...").
std::string random_request_id(std::string_view prefix);

}  // namespace optimate::server
