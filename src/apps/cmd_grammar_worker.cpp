// `optimate grammar-worker` (not listed in --help): the child process `serve` compiles
// structured outputs' grammars in, so that a compile past its deadline can be killed
// (structured/grammar_workers.h). It reads and answers on its standard input, a socket.
#include <unistd.h>

#include <cstdlib>

#include "apps/commands.h"
#include "structured/grammar_workers.h"

namespace optimate::apps {

void add_grammar_worker_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("grammar-worker", "compiles grammars for `serve` (internal)");
  cmd->group("");  // hidden
  cmd->callback([] { std::exit(structured::serve_grammar_worker(STDIN_FILENO, STDIN_FILENO)); });
}

}  // namespace optimate::apps
