#include "backend/cpu/micro_batches.h"

#include <algorithm>

#include "core/error.h"

namespace optimate::cpu {

std::vector<ForwardBatch> split_batch(const ForwardBatch& batch, int64_t max_tokens) {
  OPTIMATE_CHECK(max_tokens >= 1, "micro-batches of {} tokens", max_tokens);
  std::vector<ForwardBatch> parts(1);
  int64_t room = max_tokens;
  for (const SeqSlice& s : batch.seqs) {
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    for (int64_t done = 0; done < n;) {
      if (room == 0) {
        parts.emplace_back();
        room = max_tokens;
      }
      const int64_t take = std::min(room, n - done);
      const bool last = done + take == n;
      parts.back().seqs.push_back({.token_ids = s.token_ids.subspan(static_cast<size_t>(done), static_cast<size_t>(take)),
                                   .start_pos = s.start_pos + done,
                                   .block_table = s.block_table,
                                   .want_logits = s.all_logits || (last && s.want_logits),
                                   .all_logits = s.all_logits});
      done += take;
      room -= take;
    }
  }
  return parts;
}

}  // namespace optimate::cpu
