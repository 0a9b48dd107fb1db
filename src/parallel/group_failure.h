// The host side of a communicator group's failure handling, for every implementation: the first
// abort's reason, and recover()'s meeting of all ranks (parallel/communicator.h). Its mutex and
// condition variable are the group's own, so an implementation's host-side waits (the in-process
// barriers) wake on an abort too.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace optimate::parallel {

class GroupFailure {
 public:
  explicit GroupFailure(int num_ranks) : size_(num_ranks) {}

  std::mutex mu;
  std::condition_variable cv;

  // With mu held. The first call keeps "rank R failed: reason" and runs on_first (a device group
  // aborts its communicators there); every call wakes the waiters.
  void abort(int rank, std::string_view reason, const std::function<void()>& on_first = {});
  bool aborted() const { return aborted_; }
  // Error(kInternal) with the abort's reason.
  [[noreturn]] void throw_aborted() const;
  // With mu held through `lock`: returns once all ranks have called it; the last to arrive runs
  // on_all (the group starts afresh there) and clears the abort.
  void recover(std::unique_lock<std::mutex>& lock, const std::function<void()>& on_all = {});

 private:
  const int size_;
  bool aborted_ = false;
  std::string reason_;
  int recovering_ = 0;
  uint64_t recoveries_ = 0;
};

}  // namespace optimate::parallel
