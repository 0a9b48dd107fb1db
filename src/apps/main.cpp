// optimate: one binary, one subcommand per job (generate, tokenize, serve, bench, ...).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "core/error.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"Optimate: an LLM serving engine with pluggable optimizers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("optimate ") + OPTIMATE_VERSION);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.parse_complete_callback([&] { optimate::set_log_level(log_level); });

  optimate::apps::add_generate_command(app);
  optimate::apps::add_tokenize_command(app);
  optimate::apps::add_bench_command(app);
  optimate::apps::add_serve_command(app);
  optimate::apps::add_settings_command(app);
  optimate::apps::add_perplexity_command(app);
  optimate::apps::add_advise_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const optimate::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
