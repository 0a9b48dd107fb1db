// POST /v1/completions and POST /v1/chat/completions.
#include <chrono>
#include <limits>
#include <mutex>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "core/error.h"
#include "sampling/sample_row.h"
#include "server/api_error.h"
#include "server/client_json.h"
#include "server/serving_api.h"

namespace optimate::server {

namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void ServingApi::check_model(const std::string& requested) const {
  if (!requested.empty() && requested != backend_.model().id)
    throw ApiError(404, fmt::format("The model `{}` does not exist.", requested), "model");
}

void ServingApi::check_queue(int64_t num_new) const {
  // More prompts than the queue ever holds: waiting would not help (0 refuses every request,
  // a server that only says it is overloaded).
  if (options_.max_num_queued_reqs > 0 && num_new > options_.max_num_queued_reqs)
    throw ApiError(400, fmt::format("The request has {} prompts, more than the {} the server queues at once "
                                    "(--max-num-queued-reqs): send them in smaller lists",
                                    num_new, options_.max_num_queued_reqs),
                   "prompt");
  if (options_.max_num_queued_reqs >= 0 &&
      backend_.num_waiting() + num_new > options_.max_num_queued_reqs) {
    metrics_.record_rejected("queue_full");
    throw ApiError(503, fmt::format("The server is overloaded: {} requests are already queued "
                                    "(--max-num-queued-reqs). Retry later.",
                                    options_.max_num_queued_reqs))
        .with_retry_after(1);
  }
}

std::vector<int32_t> ServingApi::truncate_prompt(const GenerationRequest& r, std::vector<int32_t> ids) const {
  if (!r.truncate_prompt_tokens) return ids;
  const int64_t max_model_len = backend_.model().max_model_len;
  if (*r.truncate_prompt_tokens > max_model_len)  // as vLLM: it would keep more than fits
    bad_request("truncate_prompt_tokens", "truncate_prompt_tokens ({}) is greater than max_model_len ({}): select a "
                "smaller truncation size", *r.truncate_prompt_tokens, max_model_len);
  const int64_t keep = *r.truncate_prompt_tokens == -1 ? max_model_len : *r.truncate_prompt_tokens;
  if (static_cast<int64_t>(ids.size()) <= keep) return ids;
  if (r.truncate_left) ids.erase(ids.begin(), ids.end() - keep);
  else ids.resize(static_cast<size_t>(keep));
  return ids;
}

// A text's tokens, each with a row in the model's embedding: a tokenizer larger than the model
// (a mismatched folder, which the engine only warns of at start) is the client's 400 here, as
// token-id prompts past the vocabulary are, not a request that fails in the engine.
std::vector<int32_t> ServingApi::text_tokens(std::string_view text, bool add_special_tokens, const char* field) const {
  std::vector<int32_t> ids = backend_.tokenize(text, add_special_tokens);
  const int64_t vocab = backend_.model().vocab_size;
  for (int32_t id : ids)
    if (id >= vocab)
      bad_request(field, "the text holds token {} ('{}'), past the model's vocabulary of {}: its tokenizer holds "
                  "tokens the model has no embedding for", id, backend_.token_string(id), vocab);
  return ids;
}

std::vector<std::vector<int32_t>> ServingApi::completion_prompts(const CompletionRequest& r) const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(r.prompts.size());
  for (const Prompt& p : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&p)) out.push_back(text_tokens(*text, r.add_special_tokens, "prompt"));
    else out.push_back(std::get<std::vector<int32_t>>(p));
    if (out.back().empty()) bad_request("prompt", "prompt must not be empty");
    out.back() = truncate_prompt(r, std::move(out.back()));
  }
  return out;
}

std::string ServingApi::chat_text(const ChatRequest& r) const {
  ChatRenderOptions options;
  if (r.tools.choice != ToolChoice::kNone) options.tools = &r.tools.tools;
  std::string text = backend_.render_chat(r.messages, r.add_generation_prompt, options);
  if (r.continue_final_message) {
    // transformers' rule: cut after the last occurrence of the final message's content.
    const std::string& last = r.messages.back().content;
    size_t at = text.rfind(last);
    size_t len = last.size();
    if (at == std::string::npos) {
      const std::string stripped = python_strip(last);
      at = text.rfind(stripped);
      len = stripped.size();
    }
    if (at == std::string::npos || last.empty())
      bad_request("continue_final_message", "the final message's content is not in the rendered conversation");
    text.resize(at + len);
  }
  return text;
}

std::vector<int32_t> ServingApi::chat_prompt(const ChatRequest& r) const {
  std::vector<int32_t> ids = text_tokens(chat_text(r), r.add_special_tokens, "messages");
  if (ids.empty()) bad_request("messages", "the rendered conversation is empty");
  return truncate_prompt(r, std::move(ids));
}

void ServingApi::prepare_params(GenerationRequest& r) const {
  // vLLM's bad_words: each word as written and, when that is a different token sequence of the
  // same length, after a space.
  for (const std::string& word : r.bad_words) {
    const size_t first = word.find_first_not_of(' ');
    const std::string bare = first == std::string::npos ? "" : word.substr(first);
    std::vector<int32_t> plain = backend_.tokenize(bare, false);
    std::vector<int32_t> spaced = backend_.tokenize(" " + bare, false);
    if (plain.empty()) continue;
    r.params.bad_words_token_ids.push_back(plain);
    if (!spaced.empty() && spaced[0] != plain[0] && spaced.size() == plain.size())
      r.params.bad_words_token_ids.push_back(std::move(spaced));
  }
  // best_of ranks sequences by their cumulative logprob, which needs each token's logprob.
  if (r.best_of && *r.best_of > r.params.n && !r.params.logprobs) r.params.logprobs = 0;
  // The engine would refuse it after submission, ending it as aborted: a 400 here names the field.
  if (sampling::allows_only_suppressed(r.params, backend_.model().eos_token_ids))
    bad_request("allowed_token_ids", "allowed_token_ids holds only tokens that end the sequence, which min_tokens "
                "({}) forbids before its first tokens: allow other tokens or drop min_tokens", r.params.min_tokens);
}

void ServingApi::with_grammar(std::shared_ptr<GenerationRequest> r, const std::shared_ptr<HttpExchange>& exchange,
                              std::function<void()> next) {
  if (!r->grammar) {
    next();
    return;
  }
  const std::string field = r->grammar->field;
  // The withdrawal on disconnect is registered before the compile can answer: the continuation
  // registers the request's own abort after it, on the same strand, and must not be replaced.
  struct Withdrawal {
    std::mutex mutex;
    std::shared_ptr<GrammarPool::Ticket> ticket;
    bool client_left = false;
  };
  auto withdrawal = std::make_shared<Withdrawal>();
  exchange->on_disconnect([withdrawal] {
    std::shared_ptr<GrammarPool::Ticket> ticket;
    {
      std::lock_guard lock(withdrawal->mutex);
      withdrawal->client_left = true;
      ticket = withdrawal->ticket;
    }
    if (ticket) ticket->cancel();
  });
  auto ticket = grammar_pool_.compile(*r->grammar, [this, r, exchange, field, next = std::move(next)](
                                                       std::shared_ptr<const TokenConstraint> constraint,
                                                       std::exception_ptr error) {
    // Continues on a request thread, as the handler ran (tokenizing the prompt comes next).
    boost::asio::post(request_work_, [r, exchange, field, next, constraint = std::move(constraint), error] {
      try {
        if (error) {
          try {
            std::rethrow_exception(error);
          } catch (const Error& e) {
            throw ApiError(400, without_absolute_paths(e.what()), field);  // the engine's reason
          }
        }
        r->params.constraint = constraint;
        next();
      } catch (...) {
        send_exception(*exchange, std::current_exception(), "structured output request");
      }
    });
  });
  bool client_left = false;
  {
    std::lock_guard lock(withdrawal->mutex);
    withdrawal->ticket = ticket;
    client_left = withdrawal->client_left;
  }
  if (client_left) ticket->cancel();
}

std::shared_ptr<void> ServingApi::track_in_flight() {
  in_flight_->fetch_add(1);
  return std::shared_ptr<void>(nullptr, [count = in_flight_](void*) { count->fetch_sub(1); });
}

ServingApi::Admission ServingApi::admit(const HttpRequest& http_request) {
  return {std::string(http_request["X-Request-Id"]), clock_.now_ns(), track_in_flight()};
}

SamplingParams ServingApi::prompt_params(const GenerationRequest& request, int64_t num_prompt_tokens,
                                         ApiKind kind) const {
  GenerationRequest r = request;
  if (kind == ApiKind::kChat)
    resolve_max_tokens(r, num_prompt_tokens, backend_.model().max_model_len,
                       std::numeric_limits<int64_t>::max(), "messages");
  else
    resolve_max_tokens(r, num_prompt_tokens, backend_.model().max_model_len, 16, "prompt");
  if (r.best_of) r.params.n = *r.best_of;
  return r.params;
}

void ServingApi::start_generation(const GenerationRequest& r, std::vector<std::vector<int32_t>> prompts,
                                  StreamSettings settings, const Admission& admission,
                                  const std::shared_ptr<HttpExchange>& exchange) {
  std::vector<SamplingParams> params;
  for (const auto& ids : prompts) params.push_back(prompt_params(r, static_cast<int64_t>(ids.size()), settings.kind));
  check_queue(static_cast<int64_t>(prompts.size()));

  // The one place the server turns a client's priority into the engine's.
  RequestMetadata metadata = r.metadata;
  metadata.priority = to_engine_priority(backend_.model().priority_order, r.priority);
  const char* prefix = settings.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-";
  const std::string engine_id = random_request_id(prefix);
  // vLLM names the response after X-Request-Id, else the request's request_id; the engine keeps
  // its own unique ids.
  std::string client_id = admission.client_request_id;
  if (client_id.empty()) client_id = r.request_id;
  ResponseMeta meta{client_id.empty() ? engine_id : prefix + client_id, unix_seconds(), backend_.model().id};
  settings.stream = r.stream;
  settings.include_usage = r.include_usage;
  settings.continuous_usage_stats = r.continuous_usage_stats;
  settings.n = r.params.n;
  settings.best_of = r.best_of.value_or(r.params.n);
  settings.return_token_ids = r.return_token_ids;
  settings.want_prompt_logprobs = r.params.prompt_logprobs.has_value();
  for (const auto& ids : prompts) settings.num_prompt_tokens.push_back(static_cast<int64_t>(ids.size()));
  if (r.return_token_ids) settings.prompt_token_ids = prompts;
  settings.max_tokens = params.front().max_tokens;
  settings.priority = metadata.priority;
  settings.arrival_ns = admission.arrival_ns;
  settings.submit_ns = clock_.now_ns();
  auto stream = std::make_shared<GenerationStream>(exchange, meta, std::move(settings), &metrics_, clock_);

  // Submitted on the connection's strand: the abort on disconnect and the stream's head are
  // then in place before any output the engine posts to that strand (from a request thread
  // they would only be queued beside it, and an early output would find no stream started).
  auto submit = [this, exchange, stream, engine_id, metadata, prompts = std::move(prompts), params = std::move(params),
                 tokens_as_ids = r.return_tokens_as_token_ids, streamed = r.stream,
                 in_flight = admission.in_flight]() mutable {
    // One engine request per prompt; prompt p's sequences are p * best_of .. p * best_of + best_of - 1.
    std::vector<std::string> ids;
    try {
      for (size_t p = 0; p < prompts.size(); ++p) {
        BackendRequest request;
        request.request_id = prompts.size() == 1 ? engine_id : fmt::format("{}-{}", engine_id, p);
        request.prompt_token_ids = std::move(prompts[p]);
        request.params = params[p];
        request.metadata = metadata;
        request.tokens_as_ids = tokens_as_ids;
        ids.push_back(request.request_id);
        const int64_t first_choice = static_cast<int64_t>(p) * params[p].n;
        // Outputs arrive on the engine thread; formatting and writing happen on the connection's.
        // The sink lives until the engine has finished the request: so does its in-flight count.
        backend_.submit(std::move(request), [stream, exchange, first_choice, in_flight](
                                                std::vector<GenerationOutput> outputs) {
          for (auto& out : outputs) out.index += first_choice;
          exchange->post([stream, outputs = std::move(outputs)] { stream->on_outputs(outputs); });
        });
      }
    } catch (...) {
      ids.pop_back();  // the one refused
      for (const auto& id : ids) backend_.abort(id);
      send_exception(*exchange, std::current_exception(), "generation request");
      return;
    }
    exchange->on_disconnect([backend = &backend_, ids] {
      for (const auto& id : ids) backend->abort(id);
    });
    if (streamed) exchange->start_events();
  };
  exchange->post(std::move(submit));
}

void ServingApi::completions(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                             const Admission& admission) {
  Json body = parse_json_body(http_request.body());
  auto r = std::make_shared<CompletionRequest>(parse_completion_request(body, backend_.model().vocab_size));
  check_model(r->model);
  if (r->grammar) check_queue(static_cast<int64_t>(r->prompts.size()));  // before a compile it would waste
  const bool want_logprobs = r->params.logprobs.has_value();  // as asked: best_of adds them for itself
  prepare_params(*r);
  with_grammar(r, exchange, [this, r, exchange, want_logprobs, admission] {
    StreamSettings settings;
    settings.kind = ApiKind::kCompletion;
    settings.want_logprobs = want_logprobs;
    std::vector<std::vector<int32_t>> prompts = completion_prompts(*r);
    if (r->echo) {
      for (size_t p = 0; p < prompts.size(); ++p) {
        const auto* text = std::get_if<std::string>(&r->prompts[p]);
        settings.echo_text.push_back(text && !r->truncate_prompt_tokens ? *text : backend_.detokenize(prompts[p]));
      }
      settings.echo_logprobs = settings.want_logprobs;
      settings.echo_only = r->echo_only;
    }
    start_generation(*r, std::move(prompts), std::move(settings), admission, exchange);
  });
}

void ServingApi::chat_completions(const HttpRequest& http_request, const std::shared_ptr<HttpExchange>& exchange,
                                  const Admission& admission) {
  Json body = parse_json_body(http_request.body());
  auto r = std::make_shared<ChatRequest>(parse_chat_request(body, backend_.model().vocab_size));
  check_model(r->model);
  if (r->grammar) check_queue();  // before a compile it would waste
  prepare_params(*r);
  with_grammar(r, exchange, [this, r, exchange, admission] {
    StreamSettings settings;
    settings.kind = ApiKind::kChat;
    settings.want_logprobs = r->logprobs;
    if (r->tools.choice != ToolChoice::kNone) {
      settings.tools = r->tools;
      settings.tool_parser = backend_.model().tool_parser;
    }
    // echo repeats the last message when the reply continues its role (vLLM's rule).
    const std::string reply_role = r->add_generation_prompt ? "assistant" : r->messages.back().role;
    if (r->echo && r->messages.back().role == reply_role && !r->messages.back().content.empty())
      settings.echo_text.push_back(r->messages.back().content);
    start_generation(*r, {chat_prompt(*r)}, std::move(settings), admission, exchange);
  });
}

}  // namespace optimate::server
