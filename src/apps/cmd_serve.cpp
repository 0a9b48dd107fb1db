// `optimate serve`: the OpenAI-compatible HTTP server over the engine.
//
// SIGTERM or SIGINT drains: the listener closes, idle connections close, new requests get 503,
// and requests in progress finish for up to --shutdown-timeout seconds; then every remaining
// request is aborted (its KV blocks freed) and answered properly (a stream gets a last chunk
// with finish_reason "abort", then [DONE]) before the process exits 0. A second signal skips
// the wait. SIGHUP, or a change of the --config file's content (polled every second), reloads
// the configuration between steps (engine/engine.h apply_config). The signals are blocked in
// every thread (those the libraries start before main() too: apps/main.cpp) and taken
// synchronously by the main thread alone, so no handler runs inside the engine or the network
// code and a signal that arrives during a reload waits for it to end.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "apps/commands.h"
#include "apps/startup_log.h"
#include "bench/step_estimator.h"
#include "config/config_watcher.h"
#include "config/engine_cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/kv_cache_report.h"
#include "metrics/cache_config_info.h"
#include "metrics/optimizer_metrics.h"
#include "metrics/step_profile_metrics.h"
#include "metrics/registry.h"
#include "metrics/resource_metrics.h"
#include "metrics/serving_metrics.h"
#include "server/cors.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/router.h"
#include "server/serving_api.h"

namespace optimate::apps {
namespace {

struct ServeOptions {
  EngineFlags engine;
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string api_key;
  int64_t max_num_queued_reqs = -1;
  double shutdown_timeout_s = 30.0;
  std::string served_model_name;
  int http_threads = 2;
  double read_timeout_s = 30.0;
  std::string max_body = "8MiB";
  std::string allowed_origins = "[\"*\"]";
  std::string allowed_methods = "[\"*\"]";
  std::string allowed_headers = "[\"*\"]";
  bool allow_credentials = false;
  bool access_log = false;
  std::string get_load_format = "vllm";
  std::string cost_profile;  // a profile of this backend: the throughput guard's estimate
  int grammar_threads = 2;
  double grammar_timeout_s = 10.0;
};

// The signal that arrived within `timeout_ms`, or 0.
int wait_for_signal(const sigset_t& set, int64_t timeout_ms) {
  timespec ts{static_cast<time_t>(timeout_ms / 1000), static_cast<long>(timeout_ms % 1000) * 1'000'000};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

bool is_shutdown(int sig) { return sig == SIGTERM || sig == SIGINT; }

void drain(server::HttpServer& http, server::EngineBackend& backend, const sigset_t& signals,
           double timeout_s) {
  std::fprintf(stderr, "optimate serve: draining (up to %.0f s; signal again to stop now)\n", timeout_s);
  http.begin_drain();
  const SteadyClock clock;
  const double deadline_s = clock.now_s() + timeout_s;
  while (clock.now_s() < deadline_s) {
    if (http.active_exchanges() == 0 && backend.num_unfinished() == 0) break;
    if (is_shutdown(wait_for_signal(signals, 50))) break;
  }
}

// Ends what the drain left: every request is aborted, so each client gets a complete response
// (a stream: a last chunk with finish_reason "abort", then [DONE]); then the connections close.
void abort_the_rest(server::HttpServer& http, server::EngineBackend& backend) {
  const int64_t left = backend.num_unfinished();
  const int64_t streams = http.open_streams();
  if (left > 0)
    std::fprintf(stderr,
                 "optimate serve: aborting %lld unfinished requests; %lld open streams end with "
                 "finish_reason \"abort\" and [DONE]\n",
                 static_cast<long long>(left), static_cast<long long>(streams));
  backend.shutdown(ShutdownMode::kAbort);  // the abort outputs are now on their way to the clients
  const SteadyClock clock;
  const double flush_deadline_s = clock.now_s() + 2.0;
  while (http.active_exchanges() > 0 && clock.now_s() < flush_deadline_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (const int64_t cut = http.open_streams(); cut > 0)
    std::fprintf(stderr, "optimate serve: %lld streams were not read in time and were cut\n",
                 static_cast<long long>(cut));
  http.close_all();
}

// vllm:cache_config_info's values: the settings and the KV cache the engine was given.
metrics::CacheConfigInfo cache_config_info(const EngineConfig& config, const Engine& engine) {
  const KvCacheReport kv = kv_cache_report(engine.runner().kv_shape(), engine.limits().max_model_len);
  metrics::CacheConfigInfo info;
  info.block_size = kv.block_size;
  info.gpu_memory_utilization = config.gpu_memory_utilization;
  info.swap_space_gib = config.swap_space;
  info.cache_dtype = choice_name(config.kv_cache_dtype);
  info.enable_prefix_caching = config.enable_prefix_caching;
  if (config.num_kv_blocks > 0) info.num_gpu_blocks_override = config.num_kv_blocks;
  if (config.kv_cache_memory_bytes > 0) info.kv_cache_memory_bytes = config.kv_cache_memory_bytes;
  info.num_gpu_blocks = kv.num_blocks;
  if (kv.num_host_blocks > 0) info.num_cpu_blocks = kv.num_host_blocks;
  info.kv_cache_size_tokens = kv.size_tokens;
  info.kv_cache_max_concurrency = kv.max_concurrency;
  return info;
}

// Network and grammar threads: far past what a machine runs at once, short of what it can start.
constexpr int kMaxServerThreads = 1024;

void run_serve(ServeOptions& o) {
  // Blocked before any thread starts, so every thread inherits the mask.
  const sigset_t signals = process_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const EngineConfig config = resolve_engine_config(o.engine);
  if (o.engine.print_config) {
    std::fputs(config.to_toml().c_str(), stdout);
    return;
  }
  if (o.shutdown_timeout_s < 0)
    fail(ErrorCode::kInvalidArgument, "--shutdown-timeout must be non-negative, got {}", o.shutdown_timeout_s);
  // A day at most: the timer counts nanoseconds in 64 bits, and no client takes longer to send.
  if (!(o.read_timeout_s > 0 && o.read_timeout_s <= 86400))
    fail(ErrorCode::kInvalidArgument, "--http-read-timeout must be in (0, 86400] seconds, got {}", o.read_timeout_s);
  if (o.http_threads < 1 || o.http_threads > kMaxServerThreads)
    fail(ErrorCode::kInvalidArgument, "--http-threads must be in [1, {}], got {}", kMaxServerThreads, o.http_threads);
  if (o.grammar_threads < 1 || o.grammar_threads > kMaxServerThreads)
    fail(ErrorCode::kInvalidArgument, "--grammar-compile-threads must be in [1, {}], got {}", kMaxServerThreads,
         o.grammar_threads);
  if (!(o.grammar_timeout_s > 0 && o.grammar_timeout_s <= 86400))
    fail(ErrorCode::kInvalidArgument, "--grammar-compile-timeout must be in (0, 86400] seconds, got {}",
         o.grammar_timeout_s);

  const std::string served_name = o.served_model_name.empty()
                                      ? std::filesystem::path(config.model).filename().string()
                                      : o.served_model_name;
  EngineParts parts = create_engine_parts(config);
  if (!o.cost_profile.empty()) parts.step_estimator = bench::cost_model_estimator(bench::load_cost_profile(o.cost_profile));
  const std::string device = parts.device;
  Engine engine(config, std::move(parts));
  for (const std::string& line : startup_summary(engine, device)) spdlog::info("{}", line);
  metrics::Registry registry;
  metrics::ServingMetrics metrics(registry, served_name, engine.limits().max_model_len);
  metrics::export_cache_config_info(registry, cache_config_info(config, engine));
  metrics::OptimizerMetrics optimizer_metrics(registry, served_name);
  metrics::StepProfileMetrics step_profile_metrics(registry, served_name);
  const KvCacheShape& kv = engine.runner().kv_shape();
  metrics::NvmlOpen nvml;
  if (device == "cuda") nvml = metrics::open_process_gpu();
  if (!nvml.unavailable.empty()) spdlog::info("/metrics has no GPU utilization: {}", nvml.unavailable);
  metrics::ResourceMetrics resource_metrics(
      registry, served_name,
      {device, static_cast<double>(engine.runner().weight_bytes()),
       2.0 * static_cast<double>(kv.num_layers) * static_cast<double>(kv.num_blocks) * static_cast<double>(kv.layout.slot_bytes)},
      std::move(nvml.probe));
  // Grammars whose compile time the limits do not bound are tried first in child processes of
  // this binary (/proc/self/exe: the one running, even if its file was replaced since), killed
  // at half the compile timeout: one that passes compiles again here, taking as long.
  server::EngineBackend backend(std::move(engine),
                                {served_name, {"/proc/self/exe", "grammar-worker"}, o.grammar_timeout_s / 2},
                                &metrics);
  backend.set_optimizer_metrics(&optimizer_metrics);
  backend.set_step_profile_metrics(&step_profile_metrics);

  server::Router router(o.api_key);
  const SteadyClock clock;
  server::ApiOptions api_options;
  api_options.max_num_queued_reqs = o.max_num_queued_reqs;
  api_options.version = OPTIMATE_VERSION;
  api_options.request_threads = o.http_threads;
  api_options.load_format =
      o.get_load_format == "sglang" ? server::LoadFormat::kSglang : server::LoadFormat::kVllm;
  api_options.grammar.num_threads = o.grammar_threads;
  api_options.grammar.timeout_s = o.grammar_timeout_s;
  server::HttpOptions http_options;
  http_options.host = o.host;
  http_options.port = o.port;
  http_options.num_threads = o.http_threads;
  http_options.read_timeout_s = o.read_timeout_s;
  http_options.max_body_bytes = static_cast<size_t>(parse_byte_size(o.max_body, "--max-body-size"));
  http_options.cors.allowed_origins = server::parse_cors_list("--allowed-origins", o.allowed_origins);
  http_options.cors.allowed_methods = server::parse_cors_list("--allowed-methods", o.allowed_methods);
  http_options.cors.allowed_headers = server::parse_cors_list("--allowed-headers", o.allowed_headers);
  http_options.cors.allow_credentials = o.allow_credentials;
  http_options.access_log = o.access_log;
  // Built before the API and so destroyed after it: a grammar compile still running at
  // shutdown lets go of its client's connection while the server's event loop exists.
  server::HttpServer http(http_options, router);
  server::ServingApi api(backend, registry, metrics, clock, api_options);
  api.add_routes(router);
  http.start();
  std::fprintf(stderr, "optimate serve: %s on http://%s:%u (max_model_len %lld)\n", served_name.c_str(),
               o.host.c_str(), static_cast<unsigned>(http.port()),
               static_cast<long long>(backend.model().max_model_len));

  std::optional<ConfigWatcher> watcher;
  if (!o.engine.config_path.empty()) watcher.emplace(o.engine.config_path);
  auto reload = [&](const std::string& trigger) {
    backend.reload_config([&] { return resolve_engine_config(o.engine); }, trigger);
    if (watcher) watcher->changed();  // this content is now the one seen
  };
  while (true) {
    const int sig = wait_for_signal(signals, 1000);
    if (is_shutdown(sig)) break;
    if (sig == SIGHUP) {
      if (watcher) reload("SIGHUP");
      else std::fprintf(stderr, "optimate serve: SIGHUP ignored: no --config file to reload\n");
    } else if (watcher && watcher->changed()) {
      reload("file changed");
    }
  }
  drain(http, backend, signals, o.shutdown_timeout_s);
  abort_the_rest(http, backend);
  http.stop();
  std::fprintf(stderr, "optimate serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, /metrics)");
  add_engine_flags(*cmd, o->engine);
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "require `Authorization: Bearer KEY` on /v1/*")
      ->envname("OPTIMATE_API_KEY");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "model name in the API (default: the model's file or directory name)");
  cmd->add_option("--max-num-queued-reqs", o->max_num_queued_reqs,
                  "queued requests past which new ones get 503 with Retry-After (default: unbounded; 0 refuses "
                  "every request, a server kept out of service)");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "seconds running requests may take to finish after SIGTERM")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads,
                  "network threads, and as many threads that parse and tokenize requests off them")
      ->capture_default_str();
  cmd->add_option("--http-read-timeout", o->read_timeout_s,
                  "seconds a request may take to arrive (then 408); idle connections close after it")
      ->capture_default_str();
  cmd->add_option("--max-body-size", o->max_body, "largest request body (then 413)")->capture_default_str();
  cmd->add_option("--allowed-origins", o->allowed_origins,
                  "CORS: origins allowed to call the API, a JSON list or comma-separated")
      ->capture_default_str();
  cmd->add_option("--allowed-methods", o->allowed_methods, "CORS: allowed methods")->capture_default_str();
  cmd->add_option("--allowed-headers", o->allowed_headers, "CORS: allowed request headers")
      ->capture_default_str();
  cmd->add_flag("--allow-credentials", o->allow_credentials, "CORS: allow credentials (cookies)");
  cmd->add_flag("--access-log", o->access_log, "one line per request on stderr");
  cmd->add_option("--get-load-format", o->get_load_format,
                  "GET /get_load answers as vllm-router (vllm) or sglang-router (sglang) reads it")
      ->check(CLI::IsMember({"vllm", "sglang"}))
      ->capture_default_str();
  cmd->add_option("--grammar-compile-threads", o->grammar_threads,
                  "threads compiling structured outputs' grammars (off the network threads)")
      ->capture_default_str();
  cmd->add_option("--grammar-compile-timeout", o->grammar_timeout_s,
                  "seconds a request waits for its grammar to compile, then 400, or 503 if it waited behind other "
                  "compiles (the compile goes on and is cached)")
      ->capture_default_str();
  cmd->add_option("--cost-profile", o->cost_profile,
                  "cost profile of this backend (optimate bench --calibrate): an optimizer whose steps run "
                  "below --optimizer-min-throughput-ratio of its estimate falls back");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace optimate::apps
