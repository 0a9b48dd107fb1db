// How tensor parallelism splits one Llama-family decoder over `num_ranks` ranks (Megatron-LM's
// split, as vLLM does it):
//   attention  rank r holds query heads [r*H/N, (r+1)*H/N) and KV heads [r*KV/N, (r+1)*KV/N),
//              so each query head's KV group stays on its rank and each rank's KV cache holds
//              only its own heads; q/k/v are split by output rows (column-parallel), o by
//              input columns (row-parallel), its partial products summed by one all-reduce.
//   MLP        gate and up split by output rows, down by input columns, one all-reduce; in a
//              mixture of experts every expert is split so (each rank holds a slice of every
//              expert's features), the router replicated, so every rank routes alike and the
//              experts' weighted partial sums meet in the same one all-reduce.
//   vocabulary the embedding and LM head split by rows: rank r holds tokens
//              [r*V', min(V, (r+1)*V')) with V' = ceil(V/N), the last rank's slice shorter; an
//              embedding lookup is an all-reduce of the owner's row and zeros, the logits an
//              all-gather of each rank's slice, so every rank has the same row to sample from.
// Norms and everything else are replicated.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace optimate::parallel {

struct TpPartition {
  int num_ranks = 1;
  int64_t heads_per_rank = 0;
  int64_t kv_heads_per_rank = 0;
  int64_t intermediate_per_rank = 0;  // MLP features, or each expert's
  int64_t vocab_size = 0;      // the whole model's
  int64_t vocab_per_rank = 0;  // ceil(vocab_size / num_ranks): the stride of gathered logits

  int64_t vocab_begin(int rank) const;
  int64_t vocab_end(int rank) const;
};

// The split of `config` over num_ranks ranks. Error(kInvalidArgument) saying what does not divide
// (and which sizes would) when num_ranks is below 1, does not divide the attention heads, the KV
// heads or the intermediate size, or leaves a rank no tokens of the vocabulary.
TpPartition plan_tp_partition(const ModelConfig& config, int64_t num_ranks);

// The configuration one rank's runner is built with: its heads, KV heads and intermediate size
// (an expert's, in a mixture of experts);
// the hidden size and vocabulary of the whole model (token ids and logits rows stay global).
ModelConfig rank_model_config(const ModelConfig& config, const TpPartition& partition);

}  // namespace optimate::parallel
