// The boundary between the engine and a compute backend: run one forward step over a batch of
// sequence slices whose KV lives in a paged cache, and return logits for the rows asked for.
//
// KV layout (identical on every backend): per layer, a K arena and a V arena of
// num_blocks slots of layout.slot_bytes each (kv/kv_layout.h). A sequence's token at position
// p lives in the block of block-table entry block_table[p / block_size], at row p % block_size;
// the entry gives the block's first slot and its precision, and kv/kv_format.h the bytes of
// each precision. Entries come from kv/BlockPool; the runner owns the storage.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/sampling_params.h"
#include "kv/kv_copy.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"
#include "model/model_config.h"

namespace optimate {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;  // slots per arena (a block takes layout.slots_for(precision) of them)
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  kv::KvLayout layout;     // slot size, the runner's full precision, what else it holds
  // Slots per host arena: the host tier (swap space, then the host prefix cache) in host
  // memory with the same layout; 0: none (kv/kv_copy.h).
  int64_t num_host_slots = 0;
  // Which space the block pool hands out first (kv/block_pool.h): freed blocks first when the
  // arenas' memory is mapped on first write, so resident memory follows the live blocks.
  kv::FreeSpaceOrder free_order = kv::FreeSpaceOrder::kUntouchedFirst;
};

// Turns a full-precision block into a quantized one in place: the block keeps its first slot,
// so only the entry's precision code changes (kv/kv_format.h).
using RequantizeOp = kv::RequantizeOp;

// What a runner allocated for one step. The scheduler's limits may move at run time up to
// these and never past them: a step beyond them would fail.
struct StepCapacity {
  int64_t max_num_seqs = std::numeric_limits<int64_t>::max();
  int64_t max_num_batched_tokens = std::numeric_limits<int64_t>::max();
  int64_t max_model_len = std::numeric_limits<int64_t>::max();  // positions per sequence
};

// One sequence's part of a step: a prefill chunk (many tokens) or a decode (one token).
struct SeqSlice {
  std::span<const int32_t> token_ids;   // tokens to run this step
  int64_t start_pos = 0;                // position of token_ids[0]
  std::span<const int32_t> block_table; // entries covering positions [0, start_pos + token_ids.size())
  bool want_logits = true;              // logits of the slice's last token
  // Logits of every token of the slice instead (prompt logprobs, perplexity): token_ids.size()
  // rows, in order; the last is the one sampled from. Implies want_logits.
  bool all_logits = false;
};

struct ForwardBatch {
  std::vector<SeqSlice> seqs;
};

// A token id that stands for the token drawn for row `row` of the previous launch_sample().
constexpr int32_t token_from_last_launch(int64_t row) { return static_cast<int32_t>(-1 - row); }
// The row a token_from_last_launch() id names, or -1 for an ordinary token id.
constexpr int64_t last_launch_row(int32_t token_id) { return token_id < 0 ? -1 - static_cast<int64_t>(token_id) : -1; }

// How to draw one logits row's token on the device (backend/cpu/sampler.h is the rule).
struct SampleSpec {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;
  int64_t output_index = 0;  // tokens the sequence generated before this one
};

// What a runner measured of the step it ran last (engine/step_profile.h).
struct StepDeviceTimes {
  double busy_s = 0.0;  // the device, from the step's first operation to its last
  // Seconds per stage of the forward pass, when the step was timed by stage; empty otherwise.
  std::vector<std::pair<std::string, double>> stages;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheShape& kv_shape() const = 0;
  // Runs the batch, writes K/V of every token into the cache, and fills `logits` with
  // config().vocab_size floats per row: one row per slice with want_logits (token_ids.size()
  // rows for one with all_logits), in slice order.
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Requantizes blocks before the next forward (the kv_quant optimizer), each from its slot into
  // the op's (the same slot or a free one of another page; kv/kv_format.h). Runners whose
  // layout holds only one precision (kv_shape().layout.dynamic() false) never get ops.
  virtual void requantize(std::span<const RequantizeOp> ops) = 0;
  // Copies blocks between the device arenas and the host tier, after requantize and before the
  // next forward, in the order given (kv/kv_copy.h). A runner may overlap them with its next
  // steps, as long as a step that touches a copied block sees the copy done. A runner without
  // a host tier (kv_shape().num_host_slots 0) never gets copies; this default refuses any.
  virtual void copy_kv(std::span<const kv::KvCopy> copies) {
    kv::check_copies(copies, kv_shape().num_blocks, /*host_slots=*/0);
  }
  // Bytes per second between the device arenas and the host tier, measured when the runner
  // was built; 0 without a host tier.
  virtual double host_link_bytes_per_s() const { return 0.0; }
  // Backends that sample on the device run the batch and draw one token per logits row (rows
  // in slice order, one spec each), so no logits cross to the host. The engine calls it only
  // for rows without penalties, suppressed ids or logprobs, and never with all_logits slices. False, having run nothing, when
  // the backend cannot; the engine then calls forward and samples on the host.
  virtual bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                              std::vector<int32_t>& token_ids) {
    return false;
  }
  // The same step launched without waiting for it (the overlap of host and device): the
  // tokens come from collect_sample(), in launch order, and the host may plan and launch the
  // next step meanwhile. A token id token_from_last_launch(k) in a slice stands for the token
  // drawn for row k of the launch just before this one; the runner takes it on the device, so
  // the step runs after that one there. At most two launches are uncollected at a time;
  // forward() and forward_sample() may only run once every launch is collected. The same
  // rows as forward_sample; false, having run nothing, when the runner cannot launch ahead at
  // all (an answer that never changes: the engine then runs every step synchronously).
  virtual bool launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) { return false; }
  // The tokens of the oldest uncollected launch, waiting for them.
  // The engine calls it only after a launch_sample that returned true.
  virtual void collect_sample(std::vector<int32_t>& token_ids) { token_ids.clear(); }
  // What one step may hold; unbounded by default (the CPU runner sizes its buffers per step).
  virtual StepCapacity capacity() const { return {}; }
  // Bytes of the weights as the runner holds them (the embedding table included), or 0 when
  // the runner holds none (a simulation).
  virtual int64_t weight_bytes() const { return 0; }
  // Asks for the next step to be timed by stage (a step so timed may run slower: a GPU runner
  // records an event per stage and launches it eagerly). Runners that cannot ignore it.
  virtual void time_next_step_by_stage() {}
  // What the runner measured of its last forward (or last collected launch); false when it measures nothing (the CPU
  // runner, whose steps are the host's time).
  virtual bool last_step_device_times(StepDeviceTimes& out) const { return false; }
};

}  // namespace optimate
