// The optimizer plug-in points. The scheduler and the engine call these; each reads a const
// view and returns a decision, never touching requests itself. A slot left empty falls back to
// the baseline (the "pure vLLM" behaviour), so the mechanism has no branch on which optimizer
// is active.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/kernel_family.h"
#include "optim/api/views.h"

namespace optimate::optim {

struct PolicyCounter {
  std::string name;
  double value = 0.0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The registry name of the optimizer that built this policy.
  virtual std::string_view name() const = 0;
  // The policy's own metrics (decisions taken, fallbacks, ...), exported per optimizer.
  virtual std::vector<PolicyCounter> counters() const { return {}; }
};

// Why a waiting request could not be admitted.
enum class BlockedOn {
  kMaxNumSeqs,  // every sequence slot is taken
  kKvBlocks,    // the pool has too few free blocks for its next chunk
};

// Order in which waiting requests are admitted; may ask to preempt a running one for a
// waiting one that does not fit.
class QueuePolicy : public Policy {
 public:
  // Indices into view.waiting, in admission order; requests left out wait this step.
  virtual std::vector<int64_t> order_waiting(const SchedulerView& view) = 0;
  // Called when view.waiting[waiting_index] cannot be admitted: an index into view.running to
  // preempt for it, or nothing. Called again (with a fresh view) while it keeps choosing
  // victims and the request still does not fit.
  virtual std::optional<int64_t> preempt_for(const SchedulerView& view, int64_t waiting_index,
                                             BlockedOn blocked_on) {
    return std::nullopt;
  }
};

struct BatchDecision {
  bool admit_waiting = true;  // false: run only what is already running this step
  int64_t retry_at_ns = 0;    // when admitting again is worth a look (0: next step)
};

// Whether to start new requests now or wait for a fuller batch.
class BatchPolicy : public Policy {
 public:
  virtual BatchDecision decide(const SchedulerView& view) = 0;
};

enum class PreemptMode {
  kRecompute,  // the KV is dropped and computed again when the request resumes
  kSwap,       // the KV is copied to host memory and back (kv/host_tier.h)
};
const char* preempt_mode_name(PreemptMode mode);

struct PreemptDecision {
  int64_t running_index = 0;  // index into view.running
  // How the victim gives its blocks back; empty: as the engine's preemption mode decides
  // (PreemptModePolicy).
  std::optional<PreemptMode> mode;
};

// Which running request gives its KV blocks back when the pool runs dry.
class PreemptPolicy : public Policy {
 public:
  // `candidates` are indices into view.running that may be preempted (never empty).
  virtual PreemptDecision choose_victim(const SchedulerView& view,
                                        std::span<const int64_t> candidates) = 0;
};

struct PreemptModeChoice {
  PreemptMode mode = PreemptMode::kRecompute;
  // One word from a fixed set (a metric label): "forced", "cost", "no_estimate",
  // "no_swap_space", ...
  std::string_view reason;
  std::string detail;  // the figures behind it, for the debug log
};

// How a victim gives its blocks back: recompute or swap (the engine's --preemption-mode). The
// mechanism still recomputes when a swap cannot happen (nothing computed, host space full).
class PreemptModePolicy : public Policy {
 public:
  virtual PreemptModeChoice choose_mode(const SchedulerView& view, const RequestView& victim) = 0;
};

// Blocks [first_block, first_block + num_blocks) of a running sequence's table are candidates;
// the scheduler requantizes the first max_blocks of them that can be (full precision, every
// token written, held by this sequence alone) and skips the rest.
struct RequantizeOrder {
  int64_t seq_id = 0;
  int64_t first_block = 0;  // index into the sequence's block table
  int64_t num_blocks = 0;
  kv::KvPrecision precision = kv::KvPrecision::kInt8;
  int64_t max_blocks = INT64_MAX;
};

// Precision of newly allocated KV blocks, and which existing blocks to requantize.
class KvPolicy : public Policy {
 public:
  virtual kv::KvPrecision precision_for(const SchedulerView& view, const RequestView& request) = 0;
  virtual std::vector<RequantizeOrder> requantize(const SchedulerView& view) { return {}; }
  // A limit on the blocks in use for admitting less important requests, which the scheduler
  // joins to the KV quota its queue policy reads (KvQuota::footprint_blocks, the tighter of it
  // and a controller's); nullopt: none.
  struct Footprint {
    int64_t max_blocks = 0;
    EnginePriority min_priority;  // requests at or above it are not limited
  };
  virtual std::optional<Footprint> admission_footprint(const SchedulerView& view) { return std::nullopt; }
};

// Which variant each of the runner's kernel families runs (core/kernel_family.h): family name
// to variant. A family left out runs its stable variant.
using KernelChoice = std::map<std::string, std::string>;

// The kernels a step runs on: chosen when the policies change (start, reload, the admin API),
// among the families the runner offers. The engine watches a variant other than a family's
// stable one and falls back from it when it misbehaves (engine/kernel_guard.h).
class KernelPolicy : public Policy {
 public:
  virtual KernelChoice choose(std::span<const KernelFamily> families) = 0;
};

// Knobs the engine lets a controller move between steps, with their ceilings.
struct Knobs {
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  // What the runner allocated and what the configuration said: a controller moves the limits
  // up to the capacity, and the engine returns to the configured ones when it stops.
  int64_t capacity_max_num_seqs = 0;
  int64_t capacity_max_num_batched_tokens = 0;
  int64_t configured_max_num_seqs = 0;
  int64_t configured_max_num_batched_tokens = 0;
  int64_t num_kv_blocks = 0;
  // The finest precision the KV cache can hold blocks at (laid out for kv_quant); nullopt: a
  // cache of one precision, where PolicyKnobs::kv_quant_precision has nothing to set.
  std::optional<kv::KvPrecision> kv_finest_precision;
  PolicyKnobs policy;
};

// Why a knob moved, with the figures behind it, for the decision log.
struct KnobAction {
  std::string knob;    // "max_num_seqs", "kv_quota.reserve_blocks", "batch_max_wait_ms", ...
  double from = 0.0;
  double to = 0.0;
  std::string reason;  // "ttft_p99 over target", ...
  std::vector<PolicyCounter> figures;  // the signals it acted on
};

struct KnobChanges {
  std::optional<int64_t> max_num_seqs;
  std::optional<int64_t> max_num_batched_tokens;
  std::optional<PolicyKnobs> policy;  // replaces every policy knob at once
  std::vector<KnobAction> actions;    // one per knob moved
  std::vector<std::string> disable_optimizers;  // fall back to the baseline (rollback)

  bool empty() const {
    return !max_num_seqs && !max_num_batched_tokens && !policy && disable_optimizers.empty();
  }
};

class Controller : public Policy {
 public:
  // How often tick() runs, in milliseconds of the engine clock.
  virtual double interval_ms() const { return 100.0; }
  // The span of engine time MetricsView::window covers.
  virtual double window_ms() const { return 5000.0; }
  virtual KnobChanges tick(const MetricsView& metrics, const Knobs& knobs) = 0;
};

}  // namespace optimate::optim
