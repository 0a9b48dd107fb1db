// `optimate settings`: the engine's settings table (engine_settings.def) as Markdown, the
// table docs/configuration.md carries.
#include <cstdio>

#include "apps/commands.h"
#include "config/settings.h"

namespace optimate::apps {

void add_settings_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("settings", "Print the engine settings (TOML key, flag, default, meaning) as Markdown");
  cmd->callback([] { std::fputs(settings_markdown().c_str(), stdout); });
}

}  // namespace optimate::apps
