// One rank's part of a model's weights (tp_partition.h says which part). Slices by rows are
// views of the same bytes (a mapped file stays mapped once); slices by columns are copies, kept
// in the file's quantization when the cut falls on whole blocks and widened to fp32 otherwise,
// so no block is ever cut.
#pragma once

#include "model/weights.h"
#include "parallel/tp_partition.h"

namespace optimate::parallel {

// The tensors of rank `rank`, shaped for rank_model_config(config, partition) with the embedding
// and LM head holding the rank's vocabulary rows (the LM head stays tied when it was).
ModelWeights shard_weights(const ModelConfig& config, const ModelWeights& weights,
                           const TpPartition& partition, int rank);

// Rows [row0, row0 + rows) of a 2-D tensor, or elements [row0, row0 + rows) of a 1-D one.
HostTensor slice_rows(const HostTensor& t, int64_t row0, int64_t rows);
// Columns [col0, col0 + cols) of every row of a 2-D tensor.
HostTensor slice_cols(const HostTensor& t, int64_t col0, int64_t cols);

}  // namespace optimate::parallel
