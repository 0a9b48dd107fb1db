// The small-batch decode attention kernel (paged_attention.h picks it): one thread-block
// cluster per (row, kv head), whose warps split the row's keys and combine in shared memory.
// Hopper only (kernel_paths.h): the launchers refuse a GPU on the portable path.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/paged_attention.h"

namespace optimate::cuda {

// Blocks a cluster may have: 1, 2, 4 or 8 (portable), 16 where the device allows it.
inline constexpr int kHeadClusterMaxPortable = 8;
// Warps per block as kAuto launches it: 8 fill an SM's registers; 4 let two blocks (or one and
// a block of the kernel before, under programmatic launch) share it.
inline constexpr int kHeadClusterWarps = 8;

// (row, kv head) blocks per SM up to which kAuto takes this kernel over the split tensor-core
// one. Measured on the H200 (Llama-3-8B shape, bf16, `cuda_attention_bench --only kv`): at 32
// rows (2 blocks an SM) it took 0.69x, 0.69x and 0.90x of the split kernel's time at contexts
// 1,024, 2,048 and 4,096; at 64 rows (3.9) 0.93x, 0.99x and 0.92x; at 128 rows (7.8) 1.12x,
// 1.04x and 1.02x.
inline constexpr int kHeadBlocksPerSm = 4;

// The cluster size kAuto and kHeadClusters launch with: the largest power of two up to 8 that
// keeps the num_rows * num_kv_heads clusters' blocks (one per SM) within half the SMs, so that
// every cluster finds room in its GPC at once; 1 (one block per (row, kv head), no cluster)
// while those blocks are at most kHeadBlocksPerSm per SM; 0 past that (the split tensor-core
// kernel then reads the cache faster).
int paged_attention_head_cluster_size(int64_t num_rows, int64_t num_kv_heads, int num_sms);

// How many clusters of `cluster_size` blocks of `warps` warps of the kernel p would run can be
// resident at once (0 where that size cannot launch).
int paged_attention_head_clusters_resident(const PagedAttentionParams& p, int cluster_size,
                                           int warps = kHeadClusterWarps);
// Whether a cluster of that size of the runner's kernel for p can be resident at all on the
// current device (asked once per kernel variant, size and device).
bool paged_attention_head_clusters_fit(const PagedAttentionParams& p, int cluster_size);

// Needs block_size % 16 == 0 and num_heads / num_kv_heads <= 8 (the caller checks);
// num_splits, workspace and split_counters are not used. cluster_size: 1, 2, 4, 8 or 16;
// warps per block: 8 or 4.
void paged_attention_head_clusters(const PagedAttentionParams& p, int cluster_size, cudaStream_t stream,
                                   int warps = kHeadClusterWarps);

}  // namespace optimate::cuda
