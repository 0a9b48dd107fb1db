// A constraint on what a sequence may generate (structured outputs, tool calls): a compiled
// grammar shared by every request that asks for it, and one matcher per sequence that knows
// which tokens may come next. The engine asks the matcher for a mask before each draw and
// feeds it every token drawn; structured/ builds them (the sampler only sees the mask).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace optimate {

class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Writes the tokens allowed next: bit (id % 32) of word id / 32 set when id is allowed;
  // `mask` holds (vocab + 31) / 32 words. Ending tokens are allowed once the grammar may end.
  virtual void fill_next_token_mask(std::span<uint32_t> mask) = 0;
  // Advances past `token_id`; false (nothing changes) when the grammar does not allow it.
  virtual bool accept_token(int32_t token_id) = 0;
  // True once an ending token was accepted: nothing more may follow.
  virtual bool is_terminated() const = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<TokenMatcher> new_matcher() const = 0;
  // What the constraint is, for logs and errors ("json_schema", "regex", ...).
  virtual std::string describe() const = 0;
  // Memory the compiled constraint holds (what a cache of them counts); 0 when unknown.
  virtual size_t memory_bytes() const { return 0; }
};

// Words of a token mask over `vocab_size` ids.
inline int64_t token_mask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }

}  // namespace optimate
