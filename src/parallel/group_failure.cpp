#include "parallel/group_failure.h"

#include "core/error.h"

namespace optimate::parallel {

void GroupFailure::abort(int rank, std::string_view reason, const std::function<void()>& on_first) {
  if (!aborted_) {
    aborted_ = true;
    reason_ = fmt::format("rank {} failed: {}", rank, reason);
    if (on_first) on_first();
  }
  cv.notify_all();
}

void GroupFailure::throw_aborted() const {
  fail(ErrorCode::kInternal, "tensor-parallel step abandoned: {}", reason_);
}

void GroupFailure::recover(std::unique_lock<std::mutex>& lock, const std::function<void()>& on_all) {
  const uint64_t round = recoveries_;
  if (++recovering_ == size_) {
    // Every rank is here, none inside a collective.
    recovering_ = 0;
    if (on_all) on_all();
    aborted_ = false;
    reason_.clear();
    ++recoveries_;
    cv.notify_all();
    return;
  }
  cv.wait(lock, [&] { return recoveries_ != round; });
}

}  // namespace optimate::parallel
