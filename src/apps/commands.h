// Subcommands of the `optimate` binary; each file registers one.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>

namespace optimate::apps {

// SIGTERM, SIGINT and SIGHUP: blocked in every thread from before main() (main.cpp); `serve`
// takes them in one place.
sigset_t process_signals();

void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_settings_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_advise_command(CLI::App& app);
void add_grammar_worker_command(CLI::App& app);

}  // namespace optimate::apps
