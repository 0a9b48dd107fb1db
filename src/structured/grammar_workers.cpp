#include "structured/grammar_workers.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/error.h"

extern char** environ;

namespace optimate::structured {

namespace {

// The largest message either side takes: a vocabulary's spellings, a grammar within the limits.
constexpr int64_t kMaxFrameBytes = int64_t{256} << 20;
// How long a new child may take to read the vocabulary and say it is ready.
constexpr double kStartupSeconds = 120.0;

std::chrono::steady_clock::time_point after(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(std::min(seconds, 1e6)));
}

// Messages are a length (8 bytes, little-endian) and a body of fields: bytes, 8-byte integers
// and strings (a length, then the bytes).
class Writer {
 public:
  Writer& u8(uint8_t v) {
    body_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(int64_t v) {
    for (int i = 0; i < 8; ++i) body_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xFF));
    return *this;
  }
  Writer& str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    body_ += s;
    return *this;
  }
  std::string frame() const { return Writer().i64(static_cast<int64_t>(body_.size())).body_ + body_; }

 private:
  std::string body_;
};

class Reader {
 public:
  explicit Reader(const std::string& body) : body_(body) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  int64_t i64() {
    const char* p = take(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > body_.size() - at_) fail(ErrorCode::kInternal, "grammar worker: a string runs past its message");
    return std::string(take(static_cast<size_t>(n)), static_cast<size_t>(n));
  }

 private:
  const char* take(size_t n) {
    if (n > body_.size() - at_) fail(ErrorCode::kInternal, "grammar worker: a message is shorter than its fields");
    const char* p = body_.data() + at_;
    at_ += n;
    return p;
  }
  const std::string& body_;
  size_t at_ = 0;
};

std::string encode(const Vocabulary& v) {
  Writer w;
  w.u8(v.encoding == Vocabulary::Encoding::kByteLevel ? 0 : 1).i64(v.vocab_size);
  w.i64(static_cast<int64_t>(v.stop_token_ids.size()));
  for (int32_t id : v.stop_token_ids) w.i64(id);
  w.i64(static_cast<int64_t>(v.tokens.size()));
  for (const std::string& t : v.tokens) w.str(t);
  return w.frame();
}

Vocabulary decode_vocabulary(const std::string& body) {
  Reader r(body);
  Vocabulary v;
  v.encoding = r.u8() == 0 ? Vocabulary::Encoding::kByteLevel : Vocabulary::Encoding::kByteFallback;
  v.vocab_size = r.i64();
  for (int64_t i = 0, n = r.i64(); i < n; ++i) v.stop_token_ids.push_back(static_cast<int32_t>(r.i64()));
  for (int64_t i = 0, n = r.i64(); i < n; ++i) v.tokens.push_back(r.str());
  return v;
}

std::string encode(const GrammarSpec& s) {
  Writer w;
  w.u8(static_cast<uint8_t>(s.kind)).u8(s.any_whitespace ? 1 : 0).str(s.text).str(s.field);
  w.i64(static_cast<int64_t>(s.choices.size()));
  for (const std::string& c : s.choices) w.str(c);
  return w.frame();
}

GrammarSpec decode_spec(const std::string& body) {
  Reader r(body);
  GrammarSpec s;
  s.kind = static_cast<GrammarKind>(r.u8());
  s.any_whitespace = r.u8() != 0;
  s.text = r.str();
  s.field = r.str();
  for (int64_t i = 0, n = r.i64(); i < n; ++i) s.choices.push_back(r.str());
  return s;
}

// Writes all of `bytes`; with a deadline, false once it passes (a child that stopped reading).
bool write_all(int fd, const std::string& bytes,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt) {
  size_t done = 0;
  while (done < bytes.size()) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return false;
      if (ready == 0) continue;  // the loop's check decides
    }
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | (deadline ? MSG_DONTWAIT : 0));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

enum class ReadResult { kOk, kClosed, kTimedOut };

// Reads exactly n bytes; a negative deadline waits as long as it takes.
ReadResult read_exactly(int fd, char* out, size_t n, std::chrono::steady_clock::time_point deadline, bool timed) {
  size_t done = 0;
  while (done < n) {
    if (timed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return ReadResult::kTimedOut;
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return ReadResult::kClosed;
      if (ready == 0) continue;  // the loop's check decides
    }
    const ssize_t got = ::read(fd, out + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return ReadResult::kClosed;
    done += static_cast<size_t>(got);
  }
  return ReadResult::kOk;
}

ReadResult read_frame(int fd, std::string& body, std::chrono::steady_clock::time_point deadline, bool timed) {
  char header[8];
  if (ReadResult r = read_exactly(fd, header, 8, deadline, timed); r != ReadResult::kOk) return r;
  const int64_t size = Reader(std::string(header, 8)).i64();
  if (size < 0 || size > kMaxFrameBytes) return ReadResult::kClosed;
  body.resize(static_cast<size_t>(size));
  return read_exactly(fd, body.data(), body.size(), deadline, timed);
}

}  // namespace

struct GrammarWorkers::Child {
  pid_t pid = -1;
  int fd = -1;
  ~Child() {
    if (fd >= 0) ::close(fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

GrammarWorkers::GrammarWorkers(std::vector<std::string> command, const Vocabulary& vocabulary,
                               const GrammarCompiler& compiler, double deadline_s)
    : command_(std::move(command)), vocabulary_(vocabulary), compiler_(compiler), deadline_s_(deadline_s) {
  if (command_.empty()) fail(ErrorCode::kInvalidArgument, "grammar workers need a command");
}

GrammarWorkers::~GrammarWorkers() = default;

std::unique_ptr<GrammarWorkers::Child> GrammarWorkers::start_child() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail(ErrorCode::kResourceExhausted, "grammar worker: socketpair failed: {}", std::strerror(errno));
  auto child = std::make_unique<Child>();
  child->fd = fds[0];
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);  // both ways: its stdout stays free
  // Nothing else of the server's: the listening socket and the clients' connections would
  // otherwise stay open in the child (asio's sockets are not close-on-exec).
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  // A process group of its own: a Ctrl-C or a hangup meant for the server does not end its
  // compiles halfway (the server's death does: serve_grammar_worker).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> argv;
  for (std::string& arg : command_) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int spawned = ::posix_spawn(&child->pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    child->pid = -1;
    fail(ErrorCode::kResourceExhausted, "grammar worker: cannot start {}: {}", command_[0], std::strerror(spawned));
  }
  // Ready once it has read the vocabulary: the compile deadline starts after.
  std::string ready;
  const auto startup = after(kStartupSeconds);
  if (!write_all(child->fd, encode(vocabulary_), startup) || read_frame(child->fd, ready, startup, true) != ReadResult::kOk)
    fail(ErrorCode::kResourceExhausted, "grammar worker: {} did not start", command_[0]);
  return child;
}

bool GrammarWorkers::needs_deadline(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kJsonObject:
    case GrammarKind::kChoice: return false;
    case GrammarKind::kJsonSchema:  // a regex inside (a property named so too: it only costs time)
      return spec.text.find("\"pattern") != std::string::npos || spec.text.find("\"propertyNames\"") != std::string::npos;
    case GrammarKind::kRegex:
    case GrammarKind::kEbnf:
    case GrammarKind::kLark:
    case GrammarKind::kStructuralTag: return true;
  }
  return true;
}

std::shared_ptr<const TokenConstraint> GrammarWorkers::compile(const GrammarSpec& spec) {
  if (needs_deadline(spec)) {
    try {
      compile_in_child(spec);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kResourceExhausted) throw;
      // No child could start (out of processes, the binary gone): the grammar compiles here,
      // unstoppable as before, rather than being refused for the server's state.
      spdlog::warn("{}; compiling in the server", e.what());
    }
  }
  return compiler_.compile(spec);
}

void GrammarWorkers::compile_in_child(const GrammarSpec& spec) {
  const std::string job = encode(spec);
  std::string reply;
  // A child that died (idle, or under this grammar) is replaced once; twice is the grammar's.
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<Child> child;
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        child = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!child) child = start_child();
    const auto deadline = after(deadline_s_);
    const ReadResult result = write_all(child->fd, job, deadline) ? read_frame(child->fd, reply, deadline, true)
                                                                  : ReadResult::kClosed;
    if (result == ReadResult::kTimedOut)  // the child is killed as it goes
      fail(ErrorCode::kInvalidArgument, "{}: the {} took longer than {} s to compile; a simpler one compiles faster",
           spec.field, grammar_kind_name(spec.kind), deadline_s_);
    if (result == ReadResult::kOk) {
      std::lock_guard lock(mutex_);
      idle_.push_back(std::move(child));
      break;
    }
    if (attempt == 1)
      fail(ErrorCode::kInvalidArgument, "{}: the {} cannot be compiled: the grammar engine ended while compiling it",
           spec.field, grammar_kind_name(spec.kind));
  }
  Reader r(reply);
  if (r.u8() == 0) return;
  const auto code = static_cast<ErrorCode>(r.u8());
  throw Error(code, r.str());
}

int serve_grammar_worker(int in_fd, int out_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a server killed outright takes its compiles with it
  const auto forever = std::chrono::steady_clock::time_point::max();
  std::string body;
  if (read_frame(in_fd, body, forever, false) != ReadResult::kOk) return 1;
  const GrammarCompiler compiler(decode_vocabulary(body));
  if (!write_all(out_fd, Writer().u8(0).frame())) return 1;  // ready
  while (read_frame(in_fd, body, forever, false) == ReadResult::kOk) {
    Writer reply;
    try {
      compiler.compile(decode_spec(body));
      reply.u8(0);
    } catch (const Error& e) {
      reply = Writer();
      reply.u8(1).u8(static_cast<uint8_t>(e.code())).str(e.what());
    } catch (const std::exception& e) {
      reply = Writer();
      reply.u8(1).u8(static_cast<uint8_t>(ErrorCode::kInternal)).str(e.what());
    }
    if (!write_all(out_fd, reply.frame())) return 1;
  }
  return 0;
}

}  // namespace optimate::structured
