#include "parallel/rank_command.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace optimate::parallel {
namespace {

struct SliceHeader {
  int64_t start_pos = 0;
  uint32_t num_tokens = 0;
  uint32_t num_blocks = 0;
  uint8_t want_logits = 0;
  uint8_t all_logits = 0;
};

class Writer {
 public:
  explicit Writer(RankOp op) { put(op); }
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_all(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size_bytes());
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <typename T>
  void get_all(std::vector<T>& out, size_t count) {
    const size_t old = out.size();
    out.resize(old + count);
    std::memcpy(out.data() + old, take(count * sizeof(T)), count * sizeof(T));
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const uint8_t* take(size_t n) {
    if (n > bytes_.size() - pos_)
      fail(ErrorCode::kInternal, "rank command of {} bytes ends inside a field at byte {}", bytes_.size(), pos_);
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

template <typename T>
std::vector<uint8_t> encode_list(RankOp op, std::span<const T> items) {
  Writer w(op);
  w.put(static_cast<uint64_t>(items.size()));
  w.put_all(items);
  return w.take();
}

std::vector<uint8_t> encode_batch(RankOp op, const ForwardBatch& batch) {
  Writer w(op);
  w.put(static_cast<uint64_t>(batch.seqs.size()));
  for (const SeqSlice& s : batch.seqs) {
    w.put(SliceHeader{.start_pos = s.start_pos,
                      .num_tokens = static_cast<uint32_t>(s.token_ids.size()),
                      .num_blocks = static_cast<uint32_t>(s.block_table.size()),
                      .want_logits = s.want_logits,
                      .all_logits = s.all_logits});
    w.put_all(s.token_ids);
    w.put_all(s.block_table);
  }
  return w.take();
}

}  // namespace

std::vector<uint8_t> encode_forward(const ForwardBatch& batch) { return encode_batch(RankOp::kForward, batch); }
std::vector<uint8_t> encode_forward_sample(const ForwardBatch& batch) {
  return encode_batch(RankOp::kForwardSample, batch);
}
std::vector<uint8_t> encode_requantize(std::span<const RequantizeOp> ops) { return encode_list(RankOp::kRequantize, ops); }
std::vector<uint8_t> encode_copy_kv(std::span<const kv::KvCopy> copies) { return encode_list(RankOp::kCopyKv, copies); }
std::vector<uint8_t> encode_stop() { return Writer(RankOp::kStop).take(); }

void decode_rank_command(std::span<const uint8_t> bytes, RankCommand& out) {
  Reader r(bytes);
  out.op = r.get<RankOp>();
  out.batch.seqs.clear();
  out.token_ids.clear();
  out.block_table.clear();
  out.requantize.clear();
  out.copies.clear();
  switch (out.op) {
    case RankOp::kForward:
    case RankOp::kForwardSample: {
      const auto num_seqs = r.get<uint64_t>();
      std::vector<SliceHeader> headers;
      for (uint64_t i = 0; i < num_seqs; ++i) {
        headers.push_back(r.get<SliceHeader>());
        r.get_all(out.token_ids, headers.back().num_tokens);
        r.get_all(out.block_table, headers.back().num_blocks);
      }
      // The vectors are complete: the slices' spans point into them from here on.
      size_t token = 0, block = 0;
      for (const SliceHeader& h : headers) {
        out.batch.seqs.push_back({.token_ids = std::span(out.token_ids).subspan(token, h.num_tokens),
                                  .start_pos = h.start_pos,
                                  .block_table = std::span(out.block_table).subspan(block, h.num_blocks),
                                  .want_logits = h.want_logits != 0,
                                  .all_logits = h.all_logits != 0});
        token += h.num_tokens;
        block += h.num_blocks;
      }
      break;
    }
    case RankOp::kRequantize: r.get_all(out.requantize, r.get<uint64_t>()); break;
    case RankOp::kCopyKv: r.get_all(out.copies, r.get<uint64_t>()); break;
    case RankOp::kStop: break;
    default: fail(ErrorCode::kInternal, "rank command with unknown operation {}", static_cast<int>(out.op));
  }
  if (!r.done()) fail(ErrorCode::kInternal, "rank command of {} bytes has bytes left over", bytes.size());
}

}  // namespace optimate::parallel
