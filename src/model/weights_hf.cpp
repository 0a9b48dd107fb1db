// Weights from a Hugging Face model directory: config.json plus model.safetensors, or shards
// listed in model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"
#include "model/safetensors_file.h"
#include "model/weight_loading.h"

namespace optimate {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& path) {
  const std::string name = fmt::format("'{}'", path.string());
  const std::string text = read_regular_file(path.string(), name, kMaxTextFileBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidFile, "'{}' is not valid JSON: {}", path.string(), e.what());
  }
}

// The shards of one model, opened once each, and which shard holds which tensor.
struct Shards {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;      // by file name
  std::map<std::string, std::string, std::less<>> tensor_to_file;     // tensor -> file name
  std::string listing;  // the file that lists the tensors, for messages
};

Shards open_shards(const fs::path& dir) {
  Shards s;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    s.listing = index.string();
    const nlohmann::json j = read_json(index);
    const auto it = j.find("weight_map");
    if (it == j.end() || !it->is_object()) {
      fail(ErrorCode::kInvalidFile, "'{}': no weight_map object", s.listing);
    }
    for (const auto& [tensor, file] : it->items()) {
      if (!file.is_string()) {
        fail(ErrorCode::kInvalidFile, "'{}': weight_map['{}'] is not a file name", s.listing,
             tensor);
      }
      const auto& name = file.get_ref<const std::string&>();
      // Shards are siblings of the index: a path elsewhere is refused.
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        fail(ErrorCode::kInvalidFile, "'{}': shard '{}' is not a plain file name", s.listing,
             name);
      }
      s.tensor_to_file.emplace(tensor, name);
      if (!s.files.contains(name)) s.files.emplace(name, SafetensorsFile::open((dir / name).string()));
    }
  } else if (fs::exists(single)) {
    s.listing = single.string();
    auto file = SafetensorsFile::open(s.listing);
    for (const auto& tensor : file->tensor_names()) s.tensor_to_file.emplace(tensor, "model.safetensors");
    s.files.emplace("model.safetensors", std::move(file));
  } else {
    fail(ErrorCode::kNotFound, "'{}': neither model.safetensors nor model.safetensors.index.json "
         "exists", dir.string());
  }
  return s;
}

}  // namespace

LoadedModel load_hf_model(const std::string& dir, bool with_weights) {
  LoadedModel model;
  model.hf_dir = dir;
  const fs::path config_path = fs::path(dir) / "config.json";
  model.config = model_config_from_hf_json(read_json(config_path), "'" + config_path.string() + "'");
  if (!with_weights) return model;

  const Shards shards = open_shards(dir);
  TensorSource source;
  source.get = [&shards](const std::string& name) -> std::optional<HostTensor> {
    auto it = shards.tensor_to_file.find(name);
    if (it == shards.tensor_to_file.end()) return std::nullopt;
    const SafetensorsFile& file = *shards.files.at(it->second);
    if (!file.has_tensor(name)) {
      fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' is listed in '{}' but absent", file.name(),
           name, shards.listing);
    }
    return file.tensor(name);
  };
  source.where = [&shards, dir](const std::string& name) {
    auto it = shards.tensor_to_file.find(name);
    return it == shards.tensor_to_file.end() ? shards.listing
                                             : (fs::path(dir) / it->second).string();
  };
  // Mixtral's MoE block is `block_sparse_moe` with experts w1 (gate), w3 (up), w2 (down);
  // Qwen3-MoE's is `mlp` with gate_proj, up_proj, down_proj and the router `gate`.
  const bool mixtral = model.config.architecture == Architecture::kMixtral;
  const std::string moe = mixtral ? "model.layers.{0}.block_sparse_moe." : "model.layers.{0}.mlp.";
  const TensorNames names{
      .tok_embeddings = "model.embed_tokens.weight", .final_norm = "model.norm.weight",
      .lm_head = "lm_head.weight", .attn_norm = "model.layers.{}.input_layernorm.weight",
      .wq = "model.layers.{}.self_attn.q_proj.weight",
      .wk = "model.layers.{}.self_attn.k_proj.weight",
      .wv = "model.layers.{}.self_attn.v_proj.weight",
      .wo = "model.layers.{}.self_attn.o_proj.weight",
      .bq = "model.layers.{}.self_attn.q_proj.bias", .bk = "model.layers.{}.self_attn.k_proj.bias",
      .bv = "model.layers.{}.self_attn.v_proj.bias",
      .q_norm = "model.layers.{}.self_attn.q_norm.weight",
      .k_norm = "model.layers.{}.self_attn.k_norm.weight",
      .ffn_norm = "model.layers.{}.post_attention_layernorm.weight",
      .w_gate = "model.layers.{}.mlp.gate_proj.weight", .w_up = "model.layers.{}.mlp.up_proj.weight",
      .w_down = "model.layers.{}.mlp.down_proj.weight",
      .router = moe + "gate.weight", .experts_gate = "", .experts_up = "", .experts_down = "",
      .experts_gate_up = "model.layers.{0}.mlp.experts.gate_up_proj",
      .experts_down_fused = "model.layers.{0}.mlp.experts.down_proj",
      .expert_gate = moe + (mixtral ? "experts.{1}.w1.weight" : "experts.{1}.gate_proj.weight"),
      .expert_up = moe + (mixtral ? "experts.{1}.w3.weight" : "experts.{1}.up_proj.weight"),
      .expert_down = moe + (mixtral ? "experts.{1}.w2.weight" : "experts.{1}.down_proj.weight")};
  model.weights = assemble_weights(model.config, source, names);
  return model;
}

}  // namespace optimate
