// optimate: one binary, one subcommand per job (generate, tokenize, serve, bench, ...).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "core/error.h"
#include "core/logging.h"

namespace optimate::apps {

sigset_t process_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace optimate::apps

namespace {

// A thread starts with its creator's signal mask, and a process signal goes to any thread that
// does not block it: a thread with the default action for SIGHUP ends the process. OpenBLAS
// starts its threads in a shared-library constructor, before main(), so the signals are
// blocked from the executable's preinit array, which the loader runs before any library's
// constructors: every thread starts with them blocked. main() unblocks them in its own thread
// only (Ctrl-C ends `generate` and `bench` as usual); `serve` blocks them again before it
// starts a thread and takes them in one place (apps/cmd_serve.cpp).
void block_process_signals(int, char**, char**) {
  const sigset_t set = optimate::apps::process_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

__attribute__((section(".preinit_array"), used)) void (*const kBlockSignalsFirst)(int, char**, char**) =
    block_process_signals;

bool is_subcommand(CLI::App& app, const std::string& name) {
  try {
    app.get_subcommand(name);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  {
    const sigset_t set = optimate::apps::process_signals();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  CLI::App app{"Optimate: an LLM serving engine with pluggable optimizers"};
  app.require_subcommand(1);
  // --log-level may also come after the subcommand (`optimate serve --log-level debug`).
  app.fallthrough();
  app.set_version_flag("--version", std::string("optimate ") + OPTIMATE_VERSION);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off (default: warn; info for serve)");
  // A server states what it runs at start (its optimizers and their options, the KV cache it
  // planned) and every automatic decision as it takes it: serve logs at info unless told otherwise.
  app.parse_complete_callback([&] {
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    const bool serving =
        std::any_of(chosen.begin(), chosen.end(), [](const CLI::App* c) { return c->get_name() == "serve"; });
    optimate::set_log_level(serving && app.count("--log-level") == 0 ? "info" : log_level);
  });

  optimate::apps::add_generate_command(app);
  optimate::apps::add_tokenize_command(app);
  optimate::apps::add_bench_command(app);
  optimate::apps::add_serve_command(app);
  optimate::apps::add_settings_command(app);
  optimate::apps::add_perplexity_command(app);
  optimate::apps::add_advise_command(app);
  optimate::apps::add_grammar_worker_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A first word that is no subcommand: say so, rather than CLI11's "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-' && !is_subcommand(app, argv[1])) {
      std::string known;
      for (const CLI::App* sub : app.get_subcommands({}))
        if (!sub->get_group().empty()) known += (known.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "error: unknown subcommand '%s' (one of: %s)\n", argv[1], known.c_str());
      return e.get_exit_code();
    }
    return app.exit(e);
  } catch (const optimate::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {  // the system's own (a thread that cannot start, a file system error)
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
