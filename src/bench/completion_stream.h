// One benchmark request over the OpenAI API: the streaming /v1/completions body that asks for
// it, and the reader that turns the streamed response into a RequestRecord.
//
// The reader follows `vllm bench serve`: the first chunk carrying text is the first token;
// every later chunk carrying text adds one token time (a chunk may hold several tokens, so ITL
// is per chunk); token counts come from the usage chunk that stream_options.include_usage asks
// for. A request succeeds only when the response is 200, its stream ends with `data: [DONE]`
// after at least one token and a usage chunk, and nothing cut it; anything else fails the
// record with the reason.
#pragma once

#include <string>
#include <string_view>

#include "bench/run_result.h"
#include "bench/sse_parser.h"
#include "bench/workload.h"

namespace optimate::bench {

// The JSON body: token ids when the workload has them, else the text; greedy; priority only
// when non-zero (a vLLM extension other servers may reject); ignore_eos only when asked.
std::string completion_request_body(const BenchRequest& request, const std::string& model, bool ignore_eos);

class CompletionStreamReader {
 public:
  // `event_timeout_s` (> 0): a 200 stream with no event for that long fails, whatever bytes
  // arrive in between (comments keep a connection busy but carry nothing: the transport's own
  // timeout, on silence, never fires for a server that sends one every few seconds forever).
  explicit CompletionStreamReader(RequestRecord& record, double event_timeout_s = 0.0)
      : record_(record), event_timeout_s_(event_timeout_s) {}

  void on_status(int status) { status_ = status; }
  // Body bytes that arrived at t_s (seconds from the start of the run). Returns false when the
  // stream is malformed: the record has failed and the connection cannot be trusted further.
  bool on_body(std::string_view bytes, double t_s);
  // The response ended at t_s: completely when `transport_error` is empty, else cut by it.
  void finish(double t_s, const std::string& transport_error);

 private:
  void on_event(const std::string& data, double t_s);
  void fail_record(std::string error);
  void malformed(const std::string& what);

  RequestRecord& record_;
  int status_ = 0;
  SseParser parser_;
  std::string error_body_;  // a non-200 response's body, for its message
  bool done_ = false;       // saw data: [DONE]
  bool usage_ = false;
  bool malformed_ = false;
  int64_t num_events_ = 0;  // JSON events read
  double event_timeout_s_ = 0.0;
  double last_event_s_ = -1.0;  // when the latest event (or the first body byte) arrived
};

}  // namespace optimate::bench
