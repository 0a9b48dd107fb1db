#include "kv/kv_copy.h"

#include <unordered_set>

#include "core/error.h"

namespace optimate::kv {
namespace {

// Slots a run reads and writes, per side (device, host).
struct Touched {
  std::unordered_set<int32_t> read[2];
  std::unordered_set<int32_t> written[2];

  void clear() {
    for (auto& s : read) s.clear();
    for (auto& s : written) s.clear();
  }
};

enum Side { kDevice = 0, kHost = 1 };

}  // namespace

std::vector<size_t> copy_batches(std::span<const KvCopy> copies) {
  std::vector<size_t> ends;
  Touched run;
  for (size_t i = 0; i < copies.size(); ++i) {
    const KvCopy& c = copies[i];
    const bool to_host = c.direction == CopyDirection::kToHost;
    const Side src = to_host ? kDevice : kHost, dst = to_host ? kHost : kDevice;
    const int32_t src_slot = to_host ? c.device_slot : c.host_slot;
    const int32_t dst_slot = to_host ? c.host_slot : c.device_slot;
    bool conflict = false;
    for (int32_t k = 0; k < c.num_slots && !conflict; ++k)
      conflict = run.written[src].count(src_slot + k) || run.written[dst].count(dst_slot + k) ||
                 run.read[dst].count(dst_slot + k);
    if (conflict) {
      ends.push_back(i);
      run.clear();
    }
    for (int32_t k = 0; k < c.num_slots; ++k) {
      run.read[src].insert(src_slot + k);
      run.written[dst].insert(dst_slot + k);
    }
  }
  if (!copies.empty()) ends.push_back(copies.size());
  return ends;
}

void check_copies(std::span<const KvCopy> copies, int64_t device_slots, int64_t host_slots) {
  for (size_t i = 0; i < copies.size(); ++i) {
    const KvCopy& c = copies[i];
    if (c.num_slots < 1 || c.device_slot < 0 || c.host_slot < 0 || c.device_slot + c.num_slots > device_slots ||
        c.host_slot + c.num_slots > host_slots)
      fail(ErrorCode::kInvalidArgument, "KV copy {}: {} slots at device slot {} and host slot {} do not fit "
           "the device's {} and the host tier's {} slots", i, c.num_slots, c.device_slot, c.host_slot,
           device_slots, host_slots);
  }
}

}  // namespace optimate::kv
