#include "bench/cost_model.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"

namespace optimate::bench {

double CostModel::matmul_params(const ModelConfig& m) {
  const double h = double(m.hidden_size), kv = double(m.num_kv_heads * m.head_dim);
  const double q = double(m.num_heads * m.head_dim);
  const double per_layer = h * q + 2.0 * h * kv + q * h + 3.0 * h * double(m.intermediate_size);
  // The LM head is a separate matrix, or the embedding read again when tied; either way it is
  // read every step.
  return double(m.num_layers) * per_layer + h * double(m.vocab_size);
}

CostModel::CostModel(CostProfile profile) : profile_(std::move(profile)) {
  const ModelConfig& m = profile_.model;
  const double kv = double(m.num_kv_heads * m.head_dim);
  lm_head_params_ = double(m.hidden_size) * double(m.vocab_size);
  matmul_params_ = matmul_params(m);
  const double projection_bits = profile_.fp8_weights ? 8.0 : profile_.weight_bits;
  weight_bytes_ = (matmul_params_ - lm_head_params_) * projection_bits / 8.0 + lm_head_params_ * profile_.weight_bits / 8.0;
  projection_flops_per_s_ = profile_.fp8_weights && profile_.peak_fp8_flops > 0.0 ? profile_.peak_fp8_flops
                                                                                  : profile_.peak_flops;
  kv_bytes_per_token_ = 2.0 * double(m.num_layers) * kv * profile_.kv_bytes_per_element;
}

double CostModel::ridge_tokens() const {
  const CostProfile& p = profile_;
  const double read_s = weight_bytes_ / (p.memory_bandwidth_bytes_per_s * p.gemm_bandwidth_efficiency);
  const double per_token_s = 2.0 * (matmul_params_ - lm_head_params_) / (projection_flops_per_s_ * p.gemm_compute_efficiency);
  return read_s / per_token_s;
}

StepCost CostModel::step_cost(const std::vector<SeqWork>& seqs) const {
  StepCost c;
  if (seqs.empty()) return c;
  const CostProfile& p = profile_;
  const ModelConfig& m = p.model;
  double tokens = 0.0, quantized_bytes = 0.0, int4_bytes = 0.0;
  for (const SeqWork& s : seqs) {
    const double n = double(s.num_new_tokens), ctx = double(s.context_len);
    tokens += n;
    // Each new token attends to the cached context and to the causal part of its own chunk.
    const double attended = n * ctx + n * (n + 1.0) / 2.0;
    c.attention_flops += 4.0 * double(m.num_layers * m.num_heads * m.head_dim) * attended;
    // Read the context, write and read the chunk.
    const double context = s.full_context_bytes >= 0.0 ? s.full_context_bytes : kv_bytes_per_token_ * ctx;
    c.kv_bytes += context + s.quantized_context_bytes + s.int4_context_bytes + kv_bytes_per_token_ * 2.0 * n;
    quantized_bytes += s.quantized_context_bytes;
    int4_bytes += s.int4_context_bytes;
  }
  c.weight_bytes = weight_bytes_;
  // Only the row a token is sampled from goes through the LM head: one per sequence.
  const double projection_flops = 2.0 * (matmul_params_ - lm_head_params_) * tokens;
  const double lm_head_flops = 2.0 * lm_head_params_ * double(seqs.size());
  c.gemm_flops = projection_flops + lm_head_flops;
  const double bw = p.memory_bandwidth_bytes_per_s, flops = p.peak_flops;
  // GEMMs and attention are separate kernels, each bound by its own roofline.
  const double gemm_s = std::max(c.weight_bytes / (bw * p.gemm_bandwidth_efficiency),
                                 (projection_flops / projection_flops_per_s_ + lm_head_flops / flops) /
                                     p.gemm_compute_efficiency);
  const double quantized_eff = p.quantized_attention_bandwidth_efficiency > 0.0
                                  ? p.quantized_attention_bandwidth_efficiency
                                  : p.attention_bandwidth_efficiency;
  const double int4_eff = p.int4_attention_bandwidth_efficiency > 0.0 ? p.int4_attention_bandwidth_efficiency
                                                                       : quantized_eff;
  const double attn_read_s = (c.kv_bytes - quantized_bytes - int4_bytes) / (bw * p.attention_bandwidth_efficiency) +
                             quantized_bytes / (bw * quantized_eff) + int4_bytes / (bw * int4_eff);
  const double attn_s = std::max(attn_read_s, c.attention_flops / (flops * p.attention_compute_efficiency));
  c.seconds = p.step_overhead_s + p.per_seq_overhead_s * double(seqs.size()) + gemm_s + attn_s;
  return c;
}

namespace {

using nlohmann::json;

template <typename T>
void get(const json& j, const char* key, T& out, const std::string& where) {
  if (!j.contains(key)) fail(ErrorCode::kInvalidFile, "{}: missing \"{}\"", where, key);
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    fail(ErrorCode::kInvalidFile, "{}: \"{}\" has the wrong type", where, key);
  }
}

}  // namespace

CostProfile load_cost_profile(const std::string& path) {
  json j = json::parse(read_regular_file(path, "cost profile " + path, kMaxTextFileBytes), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(ErrorCode::kInvalidFile, "{}: not a JSON object", path);
  CostProfile p;
  get(j, "name", p.name, path);
  get(j, "device", p.device, path);
  if (!j.contains("model") || !j["model"].is_object())
    fail(ErrorCode::kInvalidFile, "{}: missing \"model\" object", path);
  const json& m = j["model"];
  const std::string mw = path + " model";
  get(m, "num_layers", p.model.num_layers, mw);
  get(m, "hidden_size", p.model.hidden_size, mw);
  get(m, "intermediate_size", p.model.intermediate_size, mw);
  get(m, "num_heads", p.model.num_heads, mw);
  get(m, "num_kv_heads", p.model.num_kv_heads, mw);
  get(m, "head_dim", p.model.head_dim, mw);
  get(m, "vocab_size", p.model.vocab_size, mw);
  get(m, "max_position_embeddings", p.model.max_position_embeddings, mw);
  p.model.architecture_name = m.value("architecture", "LlamaForCausalLM");
  get(j, "weight_bits", p.weight_bits, path);
  get(j, "kv_bytes_per_element", p.kv_bytes_per_element, path);
  get(j, "memory_bandwidth_bytes_per_s", p.memory_bandwidth_bytes_per_s, path);
  get(j, "peak_flops", p.peak_flops, path);
  if (j.contains("peak_fp8_flops")) get(j, "peak_fp8_flops", p.peak_fp8_flops, path);
  get(j, "gemm_bandwidth_efficiency", p.gemm_bandwidth_efficiency, path);
  get(j, "gemm_compute_efficiency", p.gemm_compute_efficiency, path);
  get(j, "attention_bandwidth_efficiency", p.attention_bandwidth_efficiency, path);
  p.attention_compute_efficiency = p.gemm_compute_efficiency;
  if (j.contains("attention_compute_efficiency"))
    get(j, "attention_compute_efficiency", p.attention_compute_efficiency, path);
  p.quantized_attention_bandwidth_efficiency = p.attention_bandwidth_efficiency;
  if (j.contains("quantized_attention_bandwidth_efficiency"))
    get(j, "quantized_attention_bandwidth_efficiency", p.quantized_attention_bandwidth_efficiency, path);
  p.int4_attention_bandwidth_efficiency = p.quantized_attention_bandwidth_efficiency;
  if (j.contains("int4_attention_bandwidth_efficiency"))
    get(j, "int4_attention_bandwidth_efficiency", p.int4_attention_bandwidth_efficiency, path);
  get(j, "step_overhead_s", p.step_overhead_s, path);
  get(j, "per_seq_overhead_s", p.per_seq_overhead_s, path);
  if (j.contains("host_link_bytes_per_s")) get(j, "host_link_bytes_per_s", p.host_link_bytes_per_s, path);
  get(j, "num_kv_blocks", p.num_kv_blocks, path);
  get(j, "block_size", p.block_size, path);
  if (j.contains("sources")) {
    if (!j["sources"].is_object()) fail(ErrorCode::kInvalidFile, "{}: \"sources\" must be an object", path);
    for (const auto& [k, v] : j["sources"].items()) p.sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  p.model.validate(path);
  auto positive = [&](double v, const char* field) {
    if (!(v > 0.0)) fail(ErrorCode::kInvalidFile, "{}: \"{}\" must be > 0", path, field);
  };
  positive(p.weight_bits, "weight_bits");
  positive(p.kv_bytes_per_element, "kv_bytes_per_element");
  positive(p.memory_bandwidth_bytes_per_s, "memory_bandwidth_bytes_per_s");
  positive(p.peak_flops, "peak_flops");
  if (j.contains("peak_fp8_flops")) positive(p.peak_fp8_flops, "peak_fp8_flops");
  for (auto [v, f] : {std::pair{p.gemm_bandwidth_efficiency, "gemm_bandwidth_efficiency"},
                      std::pair{p.gemm_compute_efficiency, "gemm_compute_efficiency"},
                      std::pair{p.attention_bandwidth_efficiency, "attention_bandwidth_efficiency"},
                      std::pair{p.attention_compute_efficiency, "attention_compute_efficiency"},
                      std::pair{p.quantized_attention_bandwidth_efficiency, "quantized_attention_bandwidth_efficiency"},
                      std::pair{p.int4_attention_bandwidth_efficiency, "int4_attention_bandwidth_efficiency"}})
    if (!(v > 0.0 && v <= 1.0)) fail(ErrorCode::kInvalidFile, "{}: \"{}\" must be in (0, 1]", path, f);
  if (!(p.host_link_bytes_per_s >= 0.0)) fail(ErrorCode::kInvalidFile, "{}: \"host_link_bytes_per_s\" must be >= 0", path);
  if (p.step_overhead_s < 0 || p.per_seq_overhead_s < 0)
    fail(ErrorCode::kInvalidFile, "{}: overheads must be >= 0", path);
  if (p.num_kv_blocks < 1 || p.block_size < 1)
    fail(ErrorCode::kInvalidFile, "{}: num_kv_blocks and block_size must be >= 1", path);
  return p;
}

std::string cost_profile_to_json(const CostProfile& p) {
  const ModelConfig& m = p.model;
  json j = {{"name", p.name},
            {"device", p.device},
            {"model", {{"architecture", m.architecture_name}, {"num_layers", m.num_layers},
                       {"hidden_size", m.hidden_size}, {"intermediate_size", m.intermediate_size},
                       {"num_heads", m.num_heads}, {"num_kv_heads", m.num_kv_heads},
                       {"head_dim", m.head_dim}, {"vocab_size", m.vocab_size},
                       {"max_position_embeddings", m.max_position_embeddings}}},
            {"weight_bits", p.weight_bits},
            {"kv_bytes_per_element", p.kv_bytes_per_element},
            {"memory_bandwidth_bytes_per_s", p.memory_bandwidth_bytes_per_s},
            {"peak_flops", p.peak_flops},
            {"gemm_bandwidth_efficiency", p.gemm_bandwidth_efficiency},
            {"gemm_compute_efficiency", p.gemm_compute_efficiency},
            {"attention_bandwidth_efficiency", p.attention_bandwidth_efficiency},
            {"attention_compute_efficiency", p.attention_compute_efficiency},
            {"step_overhead_s", p.step_overhead_s},
            {"per_seq_overhead_s", p.per_seq_overhead_s},
            {"host_link_bytes_per_s", p.host_link_bytes_per_s},
            {"num_kv_blocks", p.num_kv_blocks},
            {"block_size", p.block_size},
            {"sources", p.sources}};
  // Unset (0: attention_bandwidth_efficiency serves) is left out, as the loader reads an absent key.
  if (p.quantized_attention_bandwidth_efficiency > 0.0)
    j["quantized_attention_bandwidth_efficiency"] = p.quantized_attention_bandwidth_efficiency;
  if (p.int4_attention_bandwidth_efficiency > 0.0)
    j["int4_attention_bandwidth_efficiency"] = p.int4_attention_bandwidth_efficiency;
  if (p.peak_fp8_flops > 0.0) j["peak_fp8_flops"] = p.peak_fp8_flops;
  return j.dump(2) + "\n";
}

}  // namespace optimate::bench
