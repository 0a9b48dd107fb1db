// One sequence's view of the KV cache: its blocks in position order and the content hashes of
// its full blocks. Token at position p lives in block_ids[p / block_size], slot p % block_size.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_hash.h"

namespace optimate::kv {

struct BlockTable {
  std::vector<int32_t> block_ids;
  std::vector<BlockHash> block_hashes;  // of the sequence's full blocks of known tokens
  int64_t num_cached_blocks = 0;        // leading blocks already registered in the prefix cache
};

}  // namespace optimate::kv
