// create_optimized_engine: model loading, backend choice and KV sizing for the common case.
#include <algorithm>
#include <filesystem>

#include <omp.h>

#include "backend/cpu/cpu_memory_plan.h"
#include "backend/cpu/cpu_model_runner.h"
#include "backend/cpu/cpu_tp_runner.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/tokenizer_codec.h"
#include "kv/kv_layout.h"
#include "kv/kv_precision.h"
#include "model/fp8_quant.h"
#include "model/weights.h"
#include "optim/kv_quant_policy.h"
#if OPTIMATE_HAVE_CUDA
#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/cuda_tp_runner.h"
#include "backend/cuda/kernel_paths.h"
#endif

namespace optimate {
namespace {

bool gpu_present() {
#if OPTIMATE_HAVE_CUDA
  return cuda::cuda_device_count() > 0;
#else
  return false;
#endif
}

// auto: the CUDA backend when a GPU it serves is visible; a GPU below what it needs is logged
// and left for the CPU (--device cuda then reports why).
bool gpu_usable() {
#if OPTIMATE_HAVE_CUDA
  std::string why;
  if (!gpu_present()) return false;
  if (cuda::cuda_device_supported(0, &why)) return true;
  spdlog::warn("--device auto: serving on the CPU: {}", why);
#endif
  return false;
}

std::string resolve_device(const EngineArgs& args) {
  if (args.device == Device::kCpu) return "cpu";
  if (args.device == Device::kCuda) {
#if !OPTIMATE_HAVE_CUDA
    fail(ErrorCode::kUnsupported, "--device cuda: this build has no CUDA backend (build with nvcc present)");
#endif
    if (!gpu_present()) fail(ErrorCode::kNotFound, "--device cuda: no CUDA GPU is visible");
    return "cuda";
  }
  return gpu_usable() ? "cuda" : "cpu";
}

// A tokenizer whose ids pass the model's embedding rows: a GGUF file whose own token list says
// so is damaged and is refused, as llama.cpp refuses it (its token list sizes the embedding); a
// Hugging Face folder or a --tokenizer of the user's gets a warning, since ids past the rows may
// never be used (a text that holds one is the client's 400).
void check_vocabulary(const Tokenizer& tokenizer, const LoadedModel& model, bool models_own) {
  const int64_t tokens = tokenizer.vocab_size(), rows = model.config.vocab_size;
  if (tokens <= rows) return;
  if (model.gguf && models_own)
    fail(ErrorCode::kInvalidFile, "{}: the tokenizer has {} tokens but the token embedding {} rows", model.path,
         tokens, rows);
  spdlog::warn("{}: the tokenizer has {} tokens but the model's vocabulary {}: ids {} and above have no embedding, "
               "and a request whose prompt holds one fails",
               model.path, tokens, rows, rows);
}

// --tokenizer, else the model's own; a dummy model's directory may come without one, and then
// the engine takes token ids only.
std::shared_ptr<const TextCodec> model_codec(const EngineArgs& args, const LoadedModel& model, bool dummy) {
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!args.tokenizer.empty()) {
    tokenizer = Tokenizer::load(args.tokenizer);
  } else {
    try {
      tokenizer = load_model_tokenizer(model);
    } catch (const Error& e) {
      if (!dummy || e.code() != ErrorCode::kNotFound) throw;
      spdlog::warn("{}; the engine takes token ids only", e.what());
      return nullptr;
    }
  }
  check_vocabulary(*tokenizer, model, /*models_own=*/args.tokenizer.empty());
  return std::make_shared<TokenizerCodec>(std::move(tokenizer));
}

std::unique_ptr<ModelRunner> make_cpu_runner(const EngineArgs& args, const LoadedModel& model) {
  const ModelConfig& mc = model.config;
  cpu::CpuRunnerOptions options;
  options.block_size = args.block_size;
  // bf16 by default, as on the GPU: half the bytes of f32 for the same quality (perplexity).
  options.kv_precision = kv::kv_precision_for(args.kv_cache_dtype, kv::KvPrecision::kBF16);
  const optim::KvLayoutRequest layout_request = optim::kv_layout_request(args.optimizers);
  options.kv_finest = layout_request.finest;
  options.kv_int4_keys = layout_request.int4_keys;
  const kv::KvLayout layout = cpu::CpuModelRunner::plan_layout(mc, options);
  options.num_threads = static_cast<int>(args.num_threads);
  options.activations = args.cpu_activations;
  options.quantization = args.quantization;
  // Capacity is in slots; a block of the cache's own precision takes slots_per_block of them.
  const int64_t slots_per_block = layout.slots_for(layout.base);
  const int64_t fixed_slots =
      args.num_kv_blocks != 0 ? args.num_kv_blocks
      : args.kv_cache_memory_bytes > 0 ? kv::num_slots_for_memory(args.kv_cache_memory_bytes, mc.num_layers, layout)
                                       : 0;
  const cpu::CpuMemoryPlan plan = cpu::plan_cpu_memory(
      mc, {args.max_model_len > 0 ? args.max_model_len : mc.max_position_embeddings, args.max_num_seqs,
           args.max_num_batched_tokens, args.block_size, cpu::available_memory_bytes(),
           fixed_slots > 0 ? std::max<int64_t>(1, fixed_slots / slots_per_block) : 0,
           2 * mc.num_layers * layout.slot_bytes * slots_per_block},
      options.num_threads > 0 ? options.num_threads : omp_get_max_threads());
  options.num_kv_blocks = fixed_slots > 0 ? fixed_slots : plan.num_kv_blocks * slots_per_block;
  // At most a quarter of available memory, as the device cache.
  options.host_tier = plan_host_tier(
      args, mc.num_layers, layout, static_cast<int64_t>(cpu::kKvShareOfAvailable * static_cast<double>(cpu::available_memory_bytes())));
  if (args.tensor_parallel_size > 1) {
    // The whole model's cache, split by heads: every rank holds the same slots of its own heads.
    auto runner = cpu::make_cpu_tp_runner(mc, model.weights, options, static_cast<int>(args.tensor_parallel_size));
    spdlog::info("CPU backend, tensor parallel over {} ranks: weights {:.1f} MB, {}, {} activations", runner->num_ranks(),
                 runner->weight_bytes() / 1e6, plan.describe(), choice_name(args.cpu_activations));
    return runner;
  }
  auto runner = std::make_unique<cpu::CpuModelRunner>(mc, model.weights, options);
  spdlog::info("CPU backend: weights {:.1f} MB, {}, {} activations, {} kernels, {} threads", runner->weight_bytes() / 1e6,
               plan.describe(), choice_name(args.cpu_activations), cpu::cpu_isa_name(runner->isa()), runner->num_threads());
  return runner;
}

#if OPTIMATE_HAVE_CUDA
std::unique_ptr<ModelRunner> make_cuda_runner(const EngineArgs& args, const LoadedModel& model, bool dummy) {
  cuda::CudaRunnerOptions options;
  options.gpu_memory_utilization = args.gpu_memory_utilization;
  options.block_size = args.block_size;
  // What a step may hold at most, so the limits can rise to it at run time.
  options.max_num_batched_tokens = std::max(args.max_num_batched_tokens, args.max_num_batched_tokens_capacity);
  options.max_num_seqs = std::max(args.max_num_seqs, args.max_num_seqs_capacity);
  options.max_model_len = args.max_model_len;
  options.num_kv_blocks = args.num_kv_blocks;  // slots (whole pages for a dynamic cache)
  options.kv_cache_dtype = kv::kv_precision_for(args.kv_cache_dtype, kv::KvPrecision::kBF16);
  const optim::KvLayoutRequest layout_request = optim::kv_layout_request(args.optimizers);
  options.kv_finest_precision = layout_request.finest;
  options.kv_int4_keys = layout_request.int4_keys;
  options.quantization = args.quantization;
  options.host_tier = plan_host_tier(args, model.config.num_layers, cuda::CudaModelRunner::plan_layout(model.config, options));
  if (args.tensor_parallel_size > 1) {
    // One GPU a rank over NCCL, each rank's memory plan on its own GPU.
    const cuda::CudaTpOptions tp{.num_ranks = static_cast<int>(args.tensor_parallel_size)};
    return cuda::make_cuda_tp_runner(model.config, dummy ? nullptr : &model.weights, args.seed, options, tp);
  }
  std::unique_ptr<cuda::CudaModelRunner> runner =
      dummy ? cuda::CudaModelRunner::with_dummy_weights(model.config, args.seed, options)
            : std::make_unique<cuda::CudaModelRunner>(model, options);
  const int64_t context = runner->capacity().max_model_len;
  if (args.max_model_len == 0 && context < model.config.max_position_embeddings)
    spdlog::warn("context length {} on the GPU (the model allows {}); --max-model-len sets it",
                 context, model.config.max_position_embeddings);
  return runner;
}
#endif

}  // namespace

EngineParts create_engine_parts(const EngineArgs& args) {
  args.validate();
  if (args.model.empty()) fail(ErrorCode::kInvalidArgument, "no model given (--model)");
  const std::string device = resolve_device(args);
  const bool dummy = args.load_format == LoadFormat::kDummy;
  if (dummy && device != "cuda")
    fail(ErrorCode::kUnsupported, "--load-format dummy needs the CUDA backend (device is {})", device);
  const LoadedModel model = dummy ? load_model_header(args.model) : load_model(args.model, args.load_format);

  EngineParts parts;
  parts.codec = model_codec(args, model, dummy);
#if OPTIMATE_HAVE_CUDA
  if (device == "cuda") parts.runner = make_cuda_runner(args, model, dummy);
#endif
  if (!parts.runner) parts.runner = make_cpu_runner(args, model);
  parts.device = device;
  parts.description = device + " " + std::filesystem::path(args.model).filename().string() +
                      (dummy ? " (dummy weights)" : "");
  const KvCacheShape& kv = parts.runner->kv_shape();
  const int64_t blocks = kv.num_blocks / kv.layout.slots_for(kv.layout.base);
  spdlog::info("engine on {}: KV cache of {} {} blocks of {} tokens ({} tokens){}", parts.description,
               blocks, kv::kv_precision_name(kv.layout.base), kv.block_size, blocks * kv.block_size,
               kv.layout.dynamic() ? fmt::format(", pages of {} slots for kv_quant down to {}", kv.layout.page_slots,
                                                 kv::kv_precision_name(*kv.layout.finest))
                                   : std::string());
  return parts;
}

Engine create_optimized_engine(EngineArgs args, std::vector<OptimizerSpec> optimizers) {
  for (auto& spec : optimizers) {
    std::erase_if(args.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    args.optimizers.push_back(std::move(spec));
  }
  EngineParts parts = create_engine_parts(args);
  return Engine(std::move(args), std::move(parts));
}

}  // namespace optimate
