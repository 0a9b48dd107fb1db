// Stops grammar compiles that run too long. The grammar engine cannot interrupt a compile, and
// some short regexes take it minutes (docs/openai-compatibility.md); in-process, each would
// hold a compile thread that long. A grammar whose compile time the limits do not bound (a
// regex, EBNF, Lark, a structural tag, a JSON schema with a `pattern`) is first compiled in a
// child process, killed at the deadline, and only once that compile has finished is it
// compiled here, where it takes about as long. (Sending the child's compiled grammar back
// instead is not practical: serialized, the grammar of an object of 1,000 properties is 431 MB
// and takes 23 s to write.) Other grammars compile here alone.
//
// A child is a program that runs serve_grammar_worker() on its standard input, a socket it
// reads and answers on (`optimate grammar-worker`): it reads the vocabulary once, then compiles
// one grammar at a time and answers whether it compiled (or why not). Callers on several
// threads each get a child of their own; a child is started when none is idle (reading the
// vocabulary takes it a moment) and kept for the next grammar. A compile past the deadline
// kills its child and is an Error(kInvalidArgument) saying so; a child that died is replaced.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/token_constraint.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_spec.h"

namespace optimate::structured {

class GrammarWorkers {
 public:
  // `command`: the child's program and arguments. `compiler` (over `vocabulary`) compiles
  // here; both must outlive this.
  GrammarWorkers(std::vector<std::string> command, const Vocabulary& vocabulary, const GrammarCompiler& compiler,
                 double deadline_s);
  ~GrammarWorkers();  // kills the children
  GrammarWorkers(const GrammarWorkers&) = delete;
  GrammarWorkers& operator=(const GrammarWorkers&) = delete;

  std::shared_ptr<const TokenConstraint> compile(const GrammarSpec& spec);

  // Whether the limits (grammar_limits.h) leave the compile time of `spec` unbounded.
  static bool needs_deadline(const GrammarSpec& spec);

 private:
  struct Child;
  std::unique_ptr<Child> start_child();
  void compile_in_child(const GrammarSpec& spec);

  std::vector<std::string> command_;
  const Vocabulary& vocabulary_;
  const GrammarCompiler& compiler_;
  double deadline_s_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Child>> idle_;
};

// The child's side, on sockets (one may serve both ways): reads the vocabulary, then answers
// grammars until its input closes. Returns the process's exit code.
int serve_grammar_worker(int in_fd, int out_fd);

}  // namespace optimate::structured
