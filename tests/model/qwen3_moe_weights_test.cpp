// Qwen3, Qwen3-MoE and Mixtral: configs from config.json and GGUF metadata, and weights from
// transformers' save_pretrained and from GGUF files gguf-py wrote from the same weights
// (tests/scripts/make_qwen3_mixtral_fixtures.py): both loaders must give the same tensors.
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/half.h"
#include "model/gguf_file.h"
#include "model/weights.h"
#include "gguf_builder.h"
#include "model_test_util.h"

namespace optimate {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* const kFixtures[] = {"tiny_qwen3", "tiny_qwen3_untied", "tiny_qwen3_moe", "tiny_qwen3_moe_ties",
                                 "tiny_mixtral"};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Qwen3-30B-A3B's config.json as published.
json qwen3_30b_a3b() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(Qwen3MoeConfig, ReadsTheFixturesConfigs) {
  const ModelConfig dense = load_model_header(testing::model_fixture("tiny_qwen3")).config;
  EXPECT_EQ(dense.architecture, Architecture::kQwen3);
  EXPECT_TRUE(dense.qk_norm);
  EXPECT_FALSE(dense.is_moe());
  EXPECT_EQ(dense.head_dim, 64);  // not hidden / heads (32)
  EXPECT_TRUE(dense.tie_word_embeddings);
  EXPECT_FALSE(load_model_header(testing::model_fixture("tiny_qwen3_untied")).config.tie_word_embeddings);

  const ModelConfig moe = load_model_header(testing::model_fixture("tiny_qwen3_moe")).config;
  EXPECT_EQ(moe.architecture, Architecture::kQwen3Moe);
  EXPECT_TRUE(moe.qk_norm);
  EXPECT_EQ(moe.moe.num_experts, 4);  // transformers 5 writes num_local_experts
  EXPECT_EQ(moe.moe.num_experts_per_tok, 2);
  EXPECT_EQ(moe.moe.expert_intermediate_size, 32);
  EXPECT_EQ(moe.mlp_width(), 32);
  EXPECT_TRUE(moe.moe.norm_topk_prob);
  EXPECT_FALSE(load_model_header(testing::model_fixture("tiny_qwen3_moe_ties")).config.moe.norm_topk_prob);

  const ModelConfig mixtral = load_model_header(testing::model_fixture("tiny_mixtral")).config;
  EXPECT_EQ(mixtral.architecture, Architecture::kMixtral);
  EXPECT_FALSE(mixtral.qk_norm);
  EXPECT_EQ(mixtral.moe.num_experts, 4);
  EXPECT_EQ(mixtral.moe.expert_intermediate_size, mixtral.intermediate_size);
  EXPECT_TRUE(mixtral.moe.norm_topk_prob);
}

TEST(Qwen3MoeConfig, CountsTheParametersOfQwen3_30B_A3B) {
  const ModelConfig c = model_config_from_hf_json(qwen3_30b_a3b(), "config.json");
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.expert_intermediate_size, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  // The model card: 30.5B parameters, 3.3B activated (3.35B here, counting both untied
  // embedding matrices whole as the card's total does).
  EXPECT_NEAR(c.num_parameters() / 1e9, 30.53, 0.01);
  EXPECT_NEAR(c.num_active_parameters() / 1e9, 3.35, 0.01);
}

TEST(Qwen3MoeConfig, RefusesWhatItCannotRun) {
  auto error = [](json j) { return error_of([&] { model_config_from_hf_json(j, "config.json"); }); };
  json j = qwen3_30b_a3b();
  j["mlp_only_layers"] = {0, 47};
  EXPECT_NE(error(j).find("mlp_only_layers"), std::string::npos);
  j = qwen3_30b_a3b();
  j["decoder_sparse_step"] = 2;
  EXPECT_NE(error(j).find("decoder_sparse_step 2"), std::string::npos);
  j = qwen3_30b_a3b();
  j["shared_expert_intermediate_size"] = 5632;
  EXPECT_NE(error(j).find("shared experts"), std::string::npos);
  j = qwen3_30b_a3b();
  j["num_experts_per_tok"] = 129;
  EXPECT_NE(error(j).find("num_experts_per_tok"), std::string::npos);
  j = qwen3_30b_a3b();
  j.erase("moe_intermediate_size");
  EXPECT_NE(error(j).find("moe_intermediate_size"), std::string::npos);
}

TEST(Qwen3MoeConfig, GgufMetadataGivesTheHfConfig) {
  for (const char* name : kFixtures) {
    const ModelConfig h = load_model_header(testing::model_fixture(name)).config;
    const ModelConfig g = load_model_header(testing::model_fixture(std::string(name) + "/model.gguf")).config;
    EXPECT_EQ(g.architecture, h.architecture) << name;
    EXPECT_EQ(g.qk_norm, h.qk_norm) << name;
    EXPECT_EQ(g.head_dim, h.head_dim) << name;
    EXPECT_EQ(g.num_heads, h.num_heads) << name;
    EXPECT_EQ(g.num_kv_heads, h.num_kv_heads) << name;
    EXPECT_EQ(g.tie_word_embeddings, h.tie_word_embeddings) << name;
    EXPECT_EQ(g.moe.num_experts, h.moe.num_experts) << name;
    EXPECT_EQ(g.moe.num_experts_per_tok, h.moe.num_experts_per_tok) << name;
    EXPECT_EQ(g.moe.expert_intermediate_size, h.moe.expert_intermediate_size) << name;
    EXPECT_FLOAT_EQ(g.rope_theta, h.rope_theta) << name;
    // The ties fixture's file says expert_weights_norm false (llama.cpp would renormalize).
    EXPECT_EQ(g.moe.norm_topk_prob, h.moe.norm_topk_prob) << name;
  }
}

std::vector<uint8_t> moe_gguf(const std::string& arch, int experts, bool with_used, int shared = 0) {
  testing::GgufBuilder b;
  testing::add_decoder_keys(b, arch, 2);
  if (experts > 0) b.add_u32(arch + ".expert_count", experts);
  if (with_used) b.add_u32(arch + ".expert_used_count", 2);
  if (arch == "qwen3moe") b.add_u32(arch + ".expert_feed_forward_length", 128);
  if (shared > 0) b.add_u32(arch + ".expert_shared_count", shared);
  b.add_strings("tokenizer.ggml.tokens", std::vector<std::string>(300, "t"));
  return b.build();
}

TEST(Qwen3MoeConfig, GgufExpertKeys) {
  auto config = [](const std::vector<uint8_t>& bytes) { return model_config_from_gguf(*GgufFile::parse(bytes, "m.gguf")); };
  const ModelConfig mixtral = config(moe_gguf("llama", 8, true));
  EXPECT_EQ(mixtral.architecture, Architecture::kMixtral);
  EXPECT_EQ(mixtral.moe.expert_intermediate_size, 512);  // the feed-forward length
  EXPECT_TRUE(mixtral.moe.norm_topk_prob);
  EXPECT_EQ(config(moe_gguf("llama", 0, false)).architecture, Architecture::kLlama);
  const ModelConfig qwen = config(moe_gguf("qwen3moe", 8, true));
  EXPECT_EQ(qwen.moe.expert_intermediate_size, 128);
  EXPECT_TRUE(qwen.qk_norm);

  const auto bytes = moe_gguf("qwen3moe", 0, true);
  EXPECT_NE(error_of([&] { config(bytes); }).find("qwen3moe.expert_count"), std::string::npos);
  const auto no_used = moe_gguf("llama", 8, false);
  EXPECT_NE(error_of([&] { config(no_used); }).find("llama.expert_used_count"), std::string::npos);
  const auto shared = moe_gguf("qwen3moe", 8, true, 1);
  EXPECT_NE(error_of([&] { config(shared); }).find("shared experts"), std::string::npos);
  const auto qwen2 = moe_gguf("qwen2", 8, true);
  EXPECT_NE(error_of([&] { config(qwen2); }).find("experts in a qwen2 model"), std::string::npos);
}

void expect_same(const HostTensor& a, const HostTensor& b, const std::string& label) {
  ASSERT_EQ(a.shape, b.shape) << label;
  const std::vector<float> x = to_f32(a), y = to_f32(b);
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
  EXPECT_EQ(differ, 0) << label << ": " << a.name << " vs " << b.name;
}

void expect_same_model(const LoadedModel& a, const LoadedModel& b, const std::string& label) {
  expect_same(a.weights.tok_embeddings, b.weights.tok_embeddings, label + " embedding");
  expect_same(a.weights.lm_head, b.weights.lm_head, label + " lm_head");
  expect_same(a.weights.final_norm, b.weights.final_norm, label + " final norm");
  ASSERT_EQ(a.weights.layers.size(), b.weights.layers.size());
  for (size_t i = 0; i < a.weights.layers.size(); ++i) {
    const LayerWeights &x = a.weights.layers[i], &y = b.weights.layers[i];
    const std::string l = label + " layer " + std::to_string(i);
    for (auto [p, q, what] : {std::tuple{&x.wq, &y.wq, "q"}, {&x.wk, &y.wk, "k"}, {&x.wv, &y.wv, "v"},
                              {&x.wo, &y.wo, "o"}, {&x.attn_norm, &y.attn_norm, "attn norm"},
                              {&x.ffn_norm, &y.ffn_norm, "ffn norm"}})
      expect_same(*p, *q, l + " " + what);
    ASSERT_EQ(x.q_norm.has_value(), y.q_norm.has_value()) << l;
    if (x.q_norm) {
      expect_same(*x.q_norm, *y.q_norm, l + " q norm");
      expect_same(*x.k_norm, *y.k_norm, l + " k norm");
    }
    ASSERT_EQ(x.experts.size(), y.experts.size()) << l;
    if (x.experts.empty()) {
      expect_same(x.w_gate, y.w_gate, l + " gate");
      expect_same(x.w_down, y.w_down, l + " down");
      continue;
    }
    expect_same(x.router, y.router, l + " router");
    for (size_t e = 0; e < x.experts.size(); ++e) {
      const std::string le = l + " expert " + std::to_string(e);
      expect_same(x.experts[e].w_gate, y.experts[e].w_gate, le + " gate");
      expect_same(x.experts[e].w_up, y.experts[e].w_up, le + " up");
      expect_same(x.experts[e].w_down, y.experts[e].w_down, le + " down");
    }
  }
}

TEST(Qwen3MoeWeights, GgufAndSafetensorsHoldTheSameWeights) {
  for (const char* name : kFixtures) {
    const LoadedModel hf = load_model(testing::model_fixture(name));
    const LoadedModel gguf = load_model(testing::model_fixture(std::string(name) + "/model.gguf"));
    ASSERT_TRUE(gguf.gguf) << name;
    expect_same_model(hf, gguf, name);
    EXPECT_EQ(hf.weights.lm_head.data.data() == hf.weights.tok_embeddings.data.data(),
              hf.config.tie_word_embeddings) << name;
  }
}

TEST(Qwen3MoeWeights, StackedQ8ExpertsAreViewsOfTheFilesBlocks) {
  const LoadedModel hf = load_model(testing::model_fixture("tiny_qwen3_moe"));
  const LoadedModel q8 = load_model(testing::model_fixture("tiny_qwen3_moe/model-q8_0.gguf"));
  const auto& file = *q8.gguf;
  const HostTensor stacked = file.tensor("blk.1.ffn_down_exps.weight");
  for (size_t l = 0; l < hf.weights.layers.size(); ++l) {
    for (size_t e = 0; e < hf.weights.layers[l].experts.size(); ++e) {
      const ExpertWeights& x = q8.weights.layers[l].experts[e];
      for (const HostTensor* t : {&x.w_gate, &x.w_up, &x.w_down}) {
        EXPECT_EQ(t->dtype, DType::kQ8_0);
        EXPECT_EQ(t->data.size(), dtype_row_bytes(DType::kQ8_0, static_cast<size_t>(t->num_elems())));
      }
      // Q8_0 rounds each value to its block's 255 levels of max |w| / 127.
      const HostTensor& ref = hf.weights.layers[l].experts[e].w_up;
      const std::vector<float> a = to_f32(x.w_up), b = to_f32(ref);
      for (size_t i = 0; i < a.size(); i += 32) {
        float max = 0.0f;
        for (size_t j = i; j < i + 32; ++j) max = std::max(max, std::fabs(b[j]));
        for (size_t j = i; j < i + 32; ++j) ASSERT_LE(std::fabs(a[j] - b[j]), max / 127.0f * 0.51f + 1e-3f * max);
      }
    }
  }
  const ExpertWeights& last = q8.weights.layers[1].experts[3];
  EXPECT_EQ(last.w_down.data.data() + last.w_down.data.size(), stacked.data.data() + stacked.data.size());
}

// A safetensors file of the given tensors (bf16 bytes as they are).
void write_safetensors(const fs::path& path, const std::vector<std::pair<std::string, HostTensor>>& tensors) {
  json header = json::object();
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(t.dtype, DType::kBF16);
    header[name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// bf16 tensors concatenated along a new first dimension (each `rows` x cols).
HostTensor stack_bf16(const std::string& name, const std::vector<const HostTensor*>& parts, std::vector<int64_t> shape) {
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  for (const HostTensor* p : parts) bytes->insert(bytes->end(), p->data.begin(), p->data.end());
  HostTensor t;
  t.name = name;
  t.dtype = DType::kBF16;
  t.shape = std::move(shape);
  t.data = {bytes->data(), bytes->size()};
  t.owner = bytes;
  return t;
}

class RewrittenModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("optimate_moe_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// transformers' in-memory layout ([experts, 2 * inter, hidden] gate then up, [experts, hidden,
// inter] down) loads as the per-expert tensors it was made from.
TEST_F(RewrittenModel, StackedGateUpLayoutLoads) {
  const LoadedModel ref = load_model(testing::model_fixture("tiny_qwen3_moe"));
  const ModelConfig& c = ref.config;
  fs::copy(testing::model_fixture("tiny_qwen3_moe/config.json"), dir_ / "config.json");
  std::vector<std::pair<std::string, HostTensor>> tensors;
  const ModelWeights& w = ref.weights;
  tensors.emplace_back("model.embed_tokens.weight", w.tok_embeddings);
  tensors.emplace_back("lm_head.weight", w.lm_head);
  tensors.emplace_back("model.norm.weight", w.final_norm);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (auto [name, t] : {std::pair{"self_attn.q_proj.weight", &l.wq}, {"self_attn.k_proj.weight", &l.wk},
                           {"self_attn.v_proj.weight", &l.wv}, {"self_attn.o_proj.weight", &l.wo},
                           {"self_attn.q_norm.weight", &*l.q_norm}, {"self_attn.k_norm.weight", &*l.k_norm},
                           {"input_layernorm.weight", &l.attn_norm}, {"post_attention_layernorm.weight", &l.ffn_norm},
                           {"mlp.gate.weight", &l.router}})
      tensors.emplace_back(p + name, *t);
    std::vector<const HostTensor*> gate_up, down;
    for (const ExpertWeights& e : l.experts) {
      gate_up.push_back(&e.w_gate);
      gate_up.push_back(&e.w_up);
      down.push_back(&e.w_down);
    }
    const int64_t experts = c.moe.num_experts, inter = c.moe.expert_intermediate_size;
    tensors.emplace_back(p + "mlp.experts.gate_up_proj",
                         stack_bf16("gate_up", gate_up, {experts, 2 * inter, c.hidden_size}));
    tensors.emplace_back(p + "mlp.experts.down_proj", stack_bf16("down", down, {experts, c.hidden_size, inter}));
  }
  write_safetensors(dir_ / "model.safetensors", tensors);
  expect_same_model(ref, load_model(dir_.string()), "stacked gate_up");

  // One expert short: the error names the tensor and the shape the config implies.
  tensors.back().second.shape[0] = c.moe.num_experts - 1;
  tensors.back().second.data = tensors.back().second.data.first(tensors.back().second.data.size() * 3 / 4);
  write_safetensors(dir_ / "model.safetensors", tensors);
  const std::string err = error_of([&] { load_model(dir_.string()); });
  EXPECT_NE(err.find("model.layers.1.mlp.experts.down_proj"), std::string::npos) << err;
  EXPECT_NE(err.find("[4, 64, 32]"), std::string::npos) << err;
}

// llama.cpp's rows for interleaved rotary: head row 2 i + j holds Hugging Face's row j * half + i.
std::vector<float> permute_for_llama_cpp(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t head_dim = rows / heads, half = head_dim / 2;
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / head_dim, i = (r % head_dim) / 2, j = r % 2;
    std::copy_n(w.begin() + (h * head_dim + j * half + i) * cols, cols, out.begin() + r * cols);
  }
  return out;
}

std::vector<uint64_t> gguf_dims(const HostTensor& t) { return {t.shape.rbegin(), t.shape.rend()}; }

// Mixtral GGUF files converted before llama.cpp stacked the experts hold one tensor per expert.
TEST_F(RewrittenModel, PerExpertMixtralGgufLoads) {
  const LoadedModel ref = load_model(testing::model_fixture("tiny_mixtral"));
  const ModelConfig& c = ref.config;
  const ModelWeights& w = ref.weights;
  enum class Experts { kAll, kOneMissing, kNone };
  auto build = [&](Experts experts) {
    testing::GgufBuilder b;
    b.add_string("general.architecture", "llama");
    b.add_u32("llama.block_count", static_cast<uint32_t>(c.num_layers));
    b.add_u32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
    b.add_u32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
    b.add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
    b.add_u32("llama.attention.head_count", static_cast<uint32_t>(c.num_heads));
    b.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
    b.add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps);
    b.add_f32("llama.rope.freq_base", c.rope_theta);
    b.add_u32("llama.expert_count", static_cast<uint32_t>(c.moe.num_experts));
    b.add_u32("llama.expert_used_count", static_cast<uint32_t>(c.moe.num_experts_per_tok));
    auto f32 = [&](const std::string& name, const HostTensor& t, std::vector<float> values = {}) {
      if (values.empty()) values = to_f32(t);
      b.add_tensor(name, 0, gguf_dims(t), testing::f32_bytes(values));
    };
    f32("token_embd.weight", w.tok_embeddings);
    f32("output_norm.weight", w.final_norm);
    f32("output.weight", w.lm_head);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const LayerWeights& l = w.layers[i];
      const std::string p = "blk." + std::to_string(i) + ".";
      f32(p + "attn_norm.weight", l.attn_norm);
      f32(p + "attn_q.weight", l.wq, permute_for_llama_cpp(to_f32(l.wq), l.wq.dim(0), l.wq.dim(1), c.num_heads));
      f32(p + "attn_k.weight", l.wk, permute_for_llama_cpp(to_f32(l.wk), l.wk.dim(0), l.wk.dim(1), c.num_kv_heads));
      f32(p + "attn_v.weight", l.wv);
      f32(p + "attn_output.weight", l.wo);
      f32(p + "ffn_norm.weight", l.ffn_norm);
      f32(p + "ffn_gate_inp.weight", l.router);
      for (size_t e = 0; e < l.experts.size() && experts != Experts::kNone; ++e) {
        if (experts == Experts::kOneMissing && i == 1 && e == 2) continue;
        const std::string x = "." + std::to_string(e) + ".weight";
        f32(p + "ffn_gate" + x, l.experts[e].w_gate);
        f32(p + "ffn_up" + x, l.experts[e].w_up);
        f32(p + "ffn_down" + x, l.experts[e].w_down);
      }
    }
    return b.build();
  };
  auto load = [&](Experts experts) {
    const auto bytes = build(experts);
    const fs::path path = dir_ / "model.gguf";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    return load_model(path.string());
  };
  expect_same_model(ref, load(Experts::kAll), "per-expert gguf");
  // A missing expert is named; with none at all, the stacked tensor the format expects is.
  std::string err = error_of([&] { load(Experts::kOneMissing); });
  EXPECT_NE(err.find("blk.1.ffn_gate.2.weight"), std::string::npos) << err;
  err = error_of([&] { load(Experts::kNone); });
  EXPECT_NE(err.find("blk.0.ffn_gate_exps.weight"), std::string::npos) << err;
}

}  // namespace
}  // namespace optimate
