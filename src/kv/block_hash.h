// Content hashes of full KV blocks, chained as in vLLM v1: a block's hash covers its parent's
// hash and its own token ids, so equal hashes mean an equal whole prefix, not just equal
// blocks. Only full blocks are hashed; a partial block is never shared through the cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace optimate::kv {

using BlockHash = uint64_t;

// Parent of the first block; a fixed non-zero seed keeps an empty parent from hashing like 0.
inline constexpr BlockHash kRootBlockHash = 0x6f7074696d617465ull;

BlockHash hash_block(BlockHash parent, std::span<const int32_t> token_ids);

// Hashes of every full block of `token_ids`, extending `hashes` (which already covers the
// first hashes.size() blocks) so repeated calls on a growing sequence cost only the new blocks.
void extend_block_hashes(std::span<const int32_t> token_ids, int64_t block_size,
                         std::vector<BlockHash>& hashes);

}  // namespace optimate::kv
