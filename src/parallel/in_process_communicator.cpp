#include "parallel/in_process_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "parallel/group_failure.h"

namespace optimate::parallel {
namespace {

// What the ranks of one group share. A rank writes its own published fields before a barrier
// and reads the others' only between two barriers, so the barrier's mutex orders every access.
struct Group {
  explicit Group(int n) : size(n), failure(n), buffers(n), counts(n), roots(n), staging(n) {}

  const int size;
  GroupFailure failure;     // its mutex and condition variable serve the barriers too
  int arrived = 0;          // ranks at the current barrier
  uint64_t generation = 0;  // barriers completed

  std::vector<const void*> buffers;  // per rank: the collective's buffer
  std::vector<size_t> counts;        // per rank: its elements
  std::vector<int> roots;            // per rank: the broadcast root it names
  std::vector<std::vector<float>> staging;  // per rank: its chunk of an all-reduce

  void wait_all() {
    std::unique_lock lock(failure.mu);
    if (failure.aborted()) failure.throw_aborted();
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      failure.cv.notify_all();
      return;
    }
    failure.cv.wait(lock, [&] { return generation != gen || failure.aborted(); });
    if (generation == gen) failure.throw_aborted();
  }
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank) : g_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return g_->size; }

  void all_reduce_sum(std::span<float> data) override {
    publish(data.data(), data.size());
    g_->wait_all();
    check_counts("all_reduce_sum", data.size());
    const size_t n = data.size();
    auto chunk_begin = [&](int r) { return n * static_cast<size_t>(r) / static_cast<size_t>(g_->size); };
    const size_t lo = chunk_begin(rank_), hi = chunk_begin(rank_ + 1);
    std::vector<float>& mine = g_->staging[rank_];
    mine.resize(hi - lo);
    for (size_t i = lo; i < hi; ++i) {
      float s = static_cast<const float*>(g_->buffers[0])[i];
      for (int r = 1; r < g_->size; ++r) s += static_cast<const float*>(g_->buffers[r])[i];
      mine[i - lo] = s;
    }
    g_->wait_all();
    for (int r = 0; r < g_->size; ++r)
      std::copy(g_->staging[r].begin(), g_->staging[r].end(), data.begin() + static_cast<ptrdiff_t>(chunk_begin(r)));
    g_->wait_all();
  }

  void all_gather(std::span<const float> send, std::span<float> recv) override {
    if (recv.size() != send.size() * static_cast<size_t>(g_->size))
      fail(ErrorCode::kInvalidArgument, "all_gather on rank {}: {} floats to receive, expected {} ranks x {}",
           rank_, recv.size(), g_->size, send.size());
    publish(send.data(), send.size());
    g_->wait_all();
    check_counts("all_gather", send.size());
    for (int r = 0; r < g_->size; ++r)
      std::copy_n(static_cast<const float*>(g_->buffers[r]), send.size(), recv.begin() + static_cast<ptrdiff_t>(r * send.size()));
    g_->wait_all();
  }

  void broadcast(std::vector<uint8_t>& bytes, int root) override {
    if (root < 0 || root >= g_->size)
      fail(ErrorCode::kInvalidArgument, "broadcast from rank {} in a group of {}", root, g_->size);
    g_->roots[rank_] = root;
    publish(&bytes, bytes.size());
    g_->wait_all();
    for (int r = 0; r < g_->size; ++r)
      if (g_->roots[r] != root)
        fail(ErrorCode::kInternal, "broadcast: rank {} names root {}, rank {} root {}", rank_, root, r, g_->roots[r]);
    if (rank_ != root) bytes = *static_cast<const std::vector<uint8_t>*>(g_->buffers[root]);
    g_->wait_all();
  }

  void barrier() override { g_->wait_all(); }

  void abort(std::string_view reason) override {
    std::lock_guard lock(g_->failure.mu);
    g_->failure.abort(rank_, reason);
  }

  void recover() override {
    std::unique_lock lock(g_->failure.mu);
    g_->failure.recover(lock, [&] { g_->arrived = 0; });
  }

 private:
  void publish(const void* buffer, size_t count) {
    g_->buffers[rank_] = buffer;
    g_->counts[rank_] = count;
  }
  // Every rank sees the same counts, so every rank throws together and none waits on the others.
  void check_counts(const char* op, size_t count) const {
    for (int r = 0; r < g_->size; ++r)
      if (g_->counts[r] != count)
        fail(ErrorCode::kInternal, "{}: rank {} passed {} elements, rank {} {}", op, r, g_->counts[r], rank_, count);
  }

  std::shared_ptr<Group> g_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int num_ranks) {
  if (num_ranks < 1) fail(ErrorCode::kInvalidArgument, "a communicator group needs at least 1 rank, got {}", num_ranks);
  auto group = std::make_shared<Group>(num_ranks);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < num_ranks; ++r) out.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return out;
}

}  // namespace optimate::parallel
