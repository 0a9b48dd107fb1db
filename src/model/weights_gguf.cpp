// Weights from a GGUF file (llama.cpp tensor names).
#include "model/gguf_file.h"
#include "model/weight_loading.h"

namespace optimate {

LoadedModel load_gguf_model(const std::string& path, bool with_weights) {
  LoadedModel model;
  model.gguf = GgufFile::open(path);
  const GgufFile& f = *model.gguf;
  model.config = model_config_from_gguf(f);
  const ModelConfig& c = model.config;
  if (!with_weights) return model;

  TensorSource source;
  source.get = [&f](const std::string& name) -> std::optional<HostTensor> {
    if (!f.has_tensor(name)) return std::nullopt;
    return f.tensor(name);
  };
  source.where = [&f](const std::string&) { return f.name(); };
  const TensorNames names{
      .tok_embeddings = "token_embd.weight", .final_norm = "output_norm.weight",
      .lm_head = "output.weight", .attn_norm = "blk.{}.attn_norm.weight",
      .wq = "blk.{}.attn_q.weight", .wk = "blk.{}.attn_k.weight", .wv = "blk.{}.attn_v.weight",
      .wo = "blk.{}.attn_output.weight", .bq = "blk.{}.attn_q.bias", .bk = "blk.{}.attn_k.bias",
      .bv = "blk.{}.attn_v.bias", .q_norm = "blk.{}.attn_q_norm.weight",
      .k_norm = "blk.{}.attn_k_norm.weight", .ffn_norm = "blk.{}.ffn_norm.weight",
      .w_gate = "blk.{}.ffn_gate.weight", .w_up = "blk.{}.ffn_up.weight",
      .w_down = "blk.{}.ffn_down.weight", .router = "blk.{}.ffn_gate_inp.weight",
      .experts_gate = "blk.{}.ffn_gate_exps.weight", .experts_up = "blk.{}.ffn_up_exps.weight",
      .experts_down = "blk.{}.ffn_down_exps.weight", .experts_gate_up = "", .experts_down_fused = "",
      // Mixtral files converted before llama.cpp stacked the experts.
      .expert_gate = "blk.{0}.ffn_gate.{1}.weight", .expert_up = "blk.{0}.ffn_up.{1}.weight",
      .expert_down = "blk.{0}.ffn_down.{1}.weight"};

  // llama.cpp's converter permutes Q/K of Llama-layout models for interleaved rotary (its
  // "normal" rope); Qwen2 and Qwen3 keep Hugging Face's rotate-half order ("neox") and are
  // left as they are.
  std::function<HostTensor(HostTensor)> fix_q, fix_k;
  if (c.architecture == Architecture::kLlama || c.architecture == Architecture::kMistral ||
      c.architecture == Architecture::kMixtral) {
    fix_q = [&c](HostTensor t) { return unpermute_rotary_rows(t, c.num_heads); };
    fix_k = [&c](HostTensor t) { return unpermute_rotary_rows(t, c.num_kv_heads); };
  }
  model.weights = assemble_weights(c, source, names, fix_q, fix_k);
  return model;
}

}  // namespace optimate
