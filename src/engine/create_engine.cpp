// create_optimized_engine: model loading, KV sizing and backend choice for the common case.
#include "backend/cpu/cpu_model_runner.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/tokenizer_codec.h"
#include "kv/kv_precision.h"
#include "model/weights.h"

namespace optimate {

Engine create_optimized_engine(EngineArgs args, std::vector<OptimizerSpec> optimizers) {
  for (auto& spec : optimizers) {
    std::erase_if(args.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    args.optimizers.push_back(std::move(spec));
  }
  args.validate();
  if (args.model.empty()) fail(ErrorCode::kInvalidArgument, "no model given (--model)");
  LoadedModel model = load_model(args.model);
  const ModelConfig& mc = model.config;
  if (args.max_model_len == 0) args.max_model_len = mc.max_position_embeddings;
  if (args.num_kv_blocks == 0)
    args.num_kv_blocks = kv::num_blocks_for_memory(args.kv_cache_memory_bytes, mc.num_layers,
                                                   mc.num_kv_heads, mc.head_dim, args.block_size,
                                                   kv::KvPrecision::kF32);
  cpu::CpuRunnerOptions options;
  options.num_kv_blocks = args.num_kv_blocks;
  options.block_size = args.block_size;
  options.num_threads = static_cast<int>(args.num_threads);
  EngineParts parts;
  parts.codec = std::make_shared<TokenizerCodec>(load_model_tokenizer(model));
  parts.runner = std::make_unique<cpu::CpuModelRunner>(mc, model.weights, options);
  return Engine(std::move(args), std::move(parts));
}

}  // namespace optimate
