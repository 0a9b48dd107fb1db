#include "kv/block_hash.h"

namespace optimate::kv {
namespace {

// splitmix64 finalizer: full avalanche, so nearby token ids give unrelated hashes.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const int32_t> token_ids) {
  uint64_t h = mix(parent ^ (static_cast<uint64_t>(token_ids.size()) << 32));
  for (int32_t id : token_ids) h = mix(h ^ static_cast<uint32_t>(id));
  return h;
}

void extend_block_hashes(std::span<const int32_t> token_ids, int64_t block_size,
                         std::vector<BlockHash>& hashes) {
  const int64_t num_full = static_cast<int64_t>(token_ids.size()) / block_size;
  for (int64_t b = static_cast<int64_t>(hashes.size()); b < num_full; ++b) {
    const BlockHash parent = b == 0 ? kRootBlockHash : hashes[b - 1];
    hashes.push_back(hash_block(parent, token_ids.subspan(b * block_size, block_size)));
  }
}

}  // namespace optimate::kv
