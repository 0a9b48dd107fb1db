// Steps launched without waiting (the overlap of host and device): launch_sample enqueues a
// step, its sampling and the copy of its draws into a pinned buffer, and returns; the next
// step may name those draws as its input tokens (token_feedback.h) and launch at once, so the
// device runs step after step while the host applies the last one's tokens. collect_sample
// waits for the oldest launch's copy.
#include "backend/cuda/cuda_model_runner.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runner_state.h"
#include "core/error.h"

namespace optimate::cuda {

const int32_t* enqueue_sampling(CudaModelRunner::State& st, int64_t n) {
  const bool all_greedy =
      std::all_of(st.sample_staging(), st.sample_staging() + n, [](const GpuSampleRow& r) { return r.greedy != 0; });
  if (all_greedy || n == 0) return st.greedy.get();
  st.timer.mark(Stage::kSampling, st.stream);
  OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(st.sample_rows.get(), st.sample_staging(), n * sizeof(GpuSampleRow),
                                      cudaMemcpyHostToDevice, st.stream));
  staging_copied(st);
  const int64_t vocab = st.config.vocab_size;
  if (!st.unfused_sampling) {
    sample_rows_fused(st.logits.get(), st.sample_rows.get(), st.sampled.get(), nullptr, n, vocab, st.stream);
    return st.sampled.get();
  }
  constexpr int64_t kUnfusedSamplerRows = 16;
  if (!st.unfused_sampler) st.unfused_sampler = std::make_unique<UnfusedSampler>(kUnfusedSamplerRows, vocab);
  for (int64_t first = 0; first < n; first += kUnfusedSamplerRows)
    st.unfused_sampler->sample(st.logits.get() + first * vocab, st.sample_rows.get() + first, st.sampled.get() + first,
                               nullptr, std::min(kUnfusedSamplerRows, n - first), st.stream);
  return st.sampled.get();
}

const int32_t* run_step_and_sample(CudaModelRunner::State& st, const ForwardBatch& batch,
                                   std::span<const SampleSpec> rows, const char* call) {
  for (size_t i = 0; i < batch.seqs.size(); ++i)
    if (batch.seqs[i].all_logits)
      fail(ErrorCode::kInvalidArgument, "{}: slice {} asks for all logits; use forward", call, i);
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n > st.options.max_num_seqs)
    fail(ErrorCode::kInvalidArgument, "{} rows to sample, the runner holds {}", n, st.options.max_num_seqs);
  const int64_t logits_rows = run_step(st, batch);
  OPTIMATE_CHECK(logits_rows == n, "step has {} logits rows, {} sampling rows given", logits_rows, n);
  for (int64_t i = 0; i < n; ++i) {
    const SampleSpec& r = rows[static_cast<size_t>(i)];
    st.sample_staging()[i] = make_sample_row(*r.params, r.seed, r.output_index);  // the slot run_step took
  }
  return enqueue_sampling(st, n);
}

bool CudaModelRunner::launch_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows) {
  State& st = *state_;
  if (st.tp.comm) return false;  // ranks step together through their group's collectives
  if (st.launches.size() >= 2)
    fail(ErrorCode::kInternal, "launch_sample with {} launches uncollected (at most two)", st.launches.size());
  const int32_t* drawn = run_step_and_sample(st, batch, rows, "launch_sample");
  const int64_t n = static_cast<int64_t>(rows.size());
  State::Launch launch;
  launch.rows = n;
  launch.out = st.next_launch_out;
  launch.span = st.timer.current_span();
  st.next_launch_out ^= 1;
  st.timer.mark(Stage::kCopyOut, st.stream);
  if (n > 0)
    OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(st.launch_out[launch.out], drawn, n * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, st.stream));
  st.timer.end_step(st.stream);
  OPTIMATE_CUDA_CHECK(cudaEventRecord(st.launch_done[launch.out], st.stream));
  // The next step's fed-back tokens read these draws before its own argmax or sampling
  // overwrites them (stream order).
  st.last_drawn = drawn;
  st.last_drawn_rows = n;
  st.launches.push_back(launch);
  return true;
}

void CudaModelRunner::collect_sample(std::vector<int32_t>& token_ids) {
  State& st = *state_;
  if (st.launches.empty()) fail(ErrorCode::kInternal, "collect_sample with no step launched");
  const State::Launch launch = st.launches.front();
  st.launches.pop_front();
  bind_device(st);
  OPTIMATE_CUDA_CHECK(cudaEventSynchronize(st.launch_done[launch.out]));
  token_ids.assign(st.launch_out[launch.out], st.launch_out[launch.out] + launch.rows);
  st.timer.set_last_span(launch.span);
}

}  // namespace optimate::cuda
