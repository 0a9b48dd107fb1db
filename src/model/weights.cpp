// load_model: picks the loader, then assembles and checks the weights.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "model/weight_loading.h"

namespace optimate {
namespace {

namespace fs = std::filesystem;

std::string layer_name(const std::string& pattern, int64_t layer) {
  return fmt::format(fmt::runtime(pattern), layer);
}

std::string expert_name(const std::string& pattern, int64_t layer, int64_t expert) {
  return fmt::format(fmt::runtime(pattern), layer, expert);
}

HostTensor fetch(const TensorSource& source, const std::string& name,
                 const std::vector<int64_t>& shape) {
  std::optional<HostTensor> t = source.get(name);
  if (!t) fail(ErrorCode::kInvalidFile, "'{}': missing tensor '{}'", source.where(name), name);
  if (t->shape != shape) {
    fail(ErrorCode::kInvalidFile, "'{}': tensor '{}' has shape [{}], the config implies [{}]",
         source.where(name), name, fmt::join(t->shape, ", "), fmt::join(shape, ", "));
  }
  if (t->dtype == DType::kI8 || t->dtype == DType::kI32) {
    fail(ErrorCode::kUnsupported, "'{}': tensor '{}' has integer dtype {}", source.where(name),
         name, dtype_name(t->dtype));
  }
  return std::move(*t);
}

fs::path single_gguf_in(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") found.push_back(entry.path());
  }
  if (found.size() != 1) {
    fail(ErrorCode::kNotFound, "'{}': expected one .gguf file, found {}", dir.string(),
         found.size());
  }
  return found[0];
}

// A stacked tensor of every expert's matrix, or nullopt when the file does not hold it.
std::optional<HostTensor> fetch_stacked(const TensorSource& source, const std::string& pattern, int64_t layer,
                                        const std::vector<int64_t>& shape) {
  if (pattern.empty()) return std::nullopt;
  const std::string name = layer_name(pattern, layer);
  if (!source.get(name)) return std::nullopt;
  return fetch(source, name, shape);
}

// The experts of `layer` in whichever layout the file has (TensorNames says which it may have).
std::vector<ExpertWeights> fetch_experts(const ModelConfig& c, const TensorSource& source, const TensorNames& names,
                                         int64_t layer) {
  const int64_t e_count = c.moe.num_experts, inter = c.moe.expert_intermediate_size, h = c.hidden_size;
  std::vector<ExpertWeights> experts(static_cast<size_t>(e_count));
  auto matrix = [&](const HostTensor& t, int64_t e, int64_t row0, int64_t rows, const char* part) {
    return stacked_matrix(t, e, row0, rows, fmt::format("{}[expert {}].{}", t.name, e, part));
  };
  if (auto gate = fetch_stacked(source, names.experts_gate, layer, {e_count, inter, h})) {
    const HostTensor up = fetch(source, layer_name(names.experts_up, layer), {e_count, inter, h});
    const HostTensor down = fetch(source, layer_name(names.experts_down, layer), {e_count, h, inter});
    for (int64_t e = 0; e < e_count; ++e)
      experts[e] = {matrix(*gate, e, 0, inter, "gate"), matrix(up, e, 0, inter, "up"),
                    matrix(down, e, 0, h, "down")};
    return experts;
  }
  if (auto gate_up = fetch_stacked(source, names.experts_gate_up, layer, {e_count, 2 * inter, h})) {
    const HostTensor down = fetch(source, layer_name(names.experts_down_fused, layer), {e_count, h, inter});
    for (int64_t e = 0; e < e_count; ++e)
      experts[e] = {matrix(*gate_up, e, 0, inter, "gate"), matrix(*gate_up, e, inter, inter, "up"),
                    matrix(down, e, 0, h, "down")};
    return experts;
  }
  // Where stacked experts are the format's own layout, a file with neither is missing those.
  if (!names.experts_gate.empty() &&
      (names.expert_gate.empty() || !source.get(expert_name(names.expert_gate, layer, 0)))) {
    const std::string stacked = layer_name(names.experts_gate, layer);
    fail(ErrorCode::kInvalidFile, "'{}': missing tensor '{}'", source.where(stacked), stacked);
  }
  for (int64_t e = 0; e < e_count; ++e) {
    auto get = [&](const std::string& pattern, std::vector<int64_t> shape) {
      return fetch(source, expert_name(pattern, layer, e), shape);
    };
    experts[e] = {get(names.expert_gate, {inter, h}), get(names.expert_up, {inter, h}),
                  get(names.expert_down, {h, inter})};
  }
  return experts;
}

}  // namespace

HostTensor stacked_matrix(const HostTensor& t, int64_t index, int64_t row0, int64_t rows, std::string name) {
  OPTIMATE_CHECK(t.shape.size() == 3 && index >= 0 && index < t.shape[0] && row0 >= 0 && rows >= 0 &&
                     row0 + rows <= t.shape[1],
                 "tensor '{}': matrix {} rows [{}, {}) of shape [{}]", t.name, index, row0, row0 + rows,
                 fmt::join(t.shape, ", "));
  const int64_t cols = t.shape[2];
  if (cols % static_cast<int64_t>(dtype_block_elems(t.dtype)) != 0)
    fail(ErrorCode::kInvalidFile, "tensor '{}': rows of {} {} values are not whole blocks", t.name, cols,
         dtype_name(t.dtype));
  const size_t row_bytes = dtype_row_bytes(t.dtype, static_cast<size_t>(cols));
  HostTensor out;
  out.name = std::move(name);
  out.dtype = t.dtype;
  out.shape = {rows, cols};
  out.data = t.data.subspan((static_cast<size_t>(index * t.shape[1] + row0)) * row_bytes,
                            static_cast<size_t>(rows) * row_bytes);
  out.owner = t.owner;
  return out;
}

ModelWeights assemble_weights(const ModelConfig& c, const TensorSource& source,
                              const TensorNames& names,
                              const std::function<HostTensor(HostTensor)>& fix_q,
                              const std::function<HostTensor(HostTensor)>& fix_k) {
  const int64_t q_rows = c.num_heads * c.head_dim;
  const int64_t kv_rows = c.num_kv_heads * c.head_dim;
  ModelWeights w;
  w.tok_embeddings = fetch(source, names.tok_embeddings, {c.vocab_size, c.hidden_size});
  w.final_norm = fetch(source, names.final_norm, {c.hidden_size});
  w.lm_head = c.tie_word_embeddings ? w.tok_embeddings
                                    : fetch(source, names.lm_head, {c.vocab_size, c.hidden_size});
  w.layers.reserve(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto get = [&](const std::string& pattern, std::vector<int64_t> shape) {
      return fetch(source, layer_name(pattern, i), shape);
    };
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = get(names.attn_norm, {c.hidden_size});
    l.wq = get(names.wq, {q_rows, c.hidden_size});
    l.wk = get(names.wk, {kv_rows, c.hidden_size});
    l.wv = get(names.wv, {kv_rows, c.hidden_size});
    l.wo = get(names.wo, {c.hidden_size, q_rows});
    if (fix_q) l.wq = fix_q(std::move(l.wq));
    if (fix_k) l.wk = fix_k(std::move(l.wk));
    if (c.attention_bias) {
      l.bq = get(names.bq, {q_rows});
      l.bk = get(names.bk, {kv_rows});
      l.bv = get(names.bv, {kv_rows});
    }
    if (c.qk_norm) {
      l.q_norm = get(names.q_norm, {c.head_dim});
      l.k_norm = get(names.k_norm, {c.head_dim});
    }
    l.ffn_norm = get(names.ffn_norm, {c.hidden_size});
    if (c.is_moe()) {
      l.router = get(names.router, {c.moe.num_experts, c.hidden_size});
      l.experts = fetch_experts(c, source, names, i);
      continue;
    }
    l.w_gate = get(names.w_gate, {c.intermediate_size, c.hidden_size});
    l.w_up = get(names.w_up, {c.intermediate_size, c.hidden_size});
    l.w_down = get(names.w_down, {c.hidden_size, c.intermediate_size});
  }
  return w;
}

HostTensor unpermute_rotary_rows(const HostTensor& t, int64_t num_heads) {
  const int64_t rows = t.dim(0);
  OPTIMATE_CHECK(rows % (2 * num_heads) == 0, "tensor '{}': {} rows for {} heads", t.name, rows,
                 num_heads);
  const int64_t head_dim = rows / num_heads;
  const int64_t half = head_dim / 2;
  const size_t row_bytes = t.data.size() / static_cast<size_t>(rows);
  auto buffer = std::make_shared<std::vector<uint8_t>>(t.data.size());
  // llama.cpp stores head row 2*i + j where Hugging Face has j*half + i (j = 0, 1).
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, j = (r % head_dim) / half, i = r % half;
    const int64_t src = head * head_dim + 2 * i + j;
    std::memcpy(buffer->data() + r * row_bytes, t.data.data() + src * row_bytes, row_bytes);
  }
  HostTensor out = t;
  out.data = {buffer->data(), buffer->size()};
  out.owner = std::move(buffer);
  return out;
}

namespace {

LoadedModel load(const std::string& path, LoadFormat format, bool with_weights) {
  if (format == LoadFormat::kDummy) format = LoadFormat::kAuto;  // the shape comes from the file as auto finds it
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    // "org/name" with no extension: a Hugging Face Hub id, which nothing here downloads.
    const fs::path p(path);
    if (std::count(path.begin(), path.end(), '/') == 1 && !p.is_absolute() && !p.has_extension() && path[0] != '.')
      fail(ErrorCode::kNotFound,
           "model '{}' does not exist. Optimate loads local model files only (a GGUF file, or a Hugging Face folder "
           "with config.json and *.safetensors); for the Hugging Face Hub model '{}', download it first "
           "(`huggingface-cli download {} --local-dir models/{}`) and pass the folder", path, path, path,
           p.filename().string());
    fail(ErrorCode::kNotFound, "model '{}' does not exist", path);
  }
  LoadedModel model;
  if (fs::is_directory(status)) {
    const bool has_config = fs::exists(fs::path(path) / "config.json");
    if (format == LoadFormat::kGguf || (format == LoadFormat::kAuto && !has_config)) {
      model = load_gguf_model(single_gguf_in(path).string(), with_weights);
    } else {
      model = load_hf_model(path, with_weights);
    }
  } else {
    const fs::path p(path);
    const bool safetensors = format == LoadFormat::kSafetensors ||
                             (format == LoadFormat::kAuto && (p.extension() == ".safetensors" ||
                                                              p.filename() == "config.json"));
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    model = safetensors ? load_hf_model(dir.string(), with_weights) : load_gguf_model(path, with_weights);
  }
  model.path = path;
  return model;
}

}  // namespace

LoadedModel load_model(const std::string& path, LoadFormat format) { return load(path, format, true); }

LoadedModel load_model_header(const std::string& path, LoadFormat format) {
  return load(path, format, false);
}

}  // namespace optimate
