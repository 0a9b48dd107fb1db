// Weight upload and seeded dummy weights. Both fill the single allocation described by
// weight_layout(), so a model loaded from files and a dummy one run the same code paths.
#include "backend/cuda/cuda_weights.h"

#include <cstring>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/dummy_value.h"
#include "core/half.h"

namespace optimate::cuda {
namespace {

const HostTensor* host_tensor(const LoadedModel& m, const WeightSegment& s) {
  const ModelWeights& w = m.weights;
  if (s.layer >= static_cast<int64_t>(w.layers.size()) && s.layer >= 0)
    fail(ErrorCode::kInvalidFile, "{}: layer {} missing", m.path, s.layer);
  const LayerWeights* l = s.layer >= 0 ? &w.layers[s.layer] : nullptr;
  switch (s.part) {
    case WeightPart::kEmbed: return &w.tok_embeddings;
    case WeightPart::kFinalNorm: return &w.final_norm;
    case WeightPart::kLmHead: return &w.lm_head;
    case WeightPart::kAttnNorm: return &l->attn_norm;
    case WeightPart::kWq: return &l->wq;
    case WeightPart::kWk: return &l->wk;
    case WeightPart::kWv: return &l->wv;
    case WeightPart::kBq: return l->bq ? &*l->bq : nullptr;
    case WeightPart::kBk: return l->bk ? &*l->bk : nullptr;
    case WeightPart::kBv: return l->bv ? &*l->bv : nullptr;
    case WeightPart::kWo: return &l->wo;
    case WeightPart::kFfnNorm: return &l->ffn_norm;
    case WeightPart::kGate: return &l->w_gate;
    case WeightPart::kUp: return &l->w_up;
    case WeightPart::kDown: return &l->w_down;
    case WeightPart::kQNorm: return l->q_norm ? &*l->q_norm : nullptr;
    case WeightPart::kKNorm: return l->k_norm ? &*l->k_norm : nullptr;
    case WeightPart::kRouter: return &l->router;
    case WeightPart::kExpertsGateUp:
    case WeightPart::kExpertsDown: break;  // one tensor per expert: expert_tensors
  }
  return nullptr;
}

// The host tensors that make up a stacked expert segment, in the segment's order: each
// expert's gate then up matrices, or each expert's down matrix.
std::vector<const HostTensor*> expert_tensors(const LoadedModel& m, const WeightSegment& s) {
  const LayerWeights& l = m.weights.layers.at(static_cast<size_t>(s.layer));
  if (static_cast<int64_t>(l.experts.size()) != s.shape[0])
    fail(ErrorCode::kInvalidFile, "{}: layer {} has {} experts, the config {}", m.path, s.layer, l.experts.size(),
         s.shape[0]);
  std::vector<const HostTensor*> out;
  for (const ExpertWeights& e : l.experts) {
    if (s.part == WeightPart::kExpertsGateUp) {
      out.push_back(&e.w_gate);
      out.push_back(&e.w_up);
    } else {
      out.push_back(&e.w_down);
    }
  }
  return out;
}

CudaWeights bind(const ModelConfig& config, const WeightLayout& layout,
                 DeviceBuffer<__nv_bfloat16> storage) {
  CudaWeights w;
  w.config = config;
  w.storage = std::move(storage);
  const __nv_bfloat16* base = w.storage.get();
  auto at = [&](WeightPart part, int64_t layer) { return base + layout.find(part, layer).offset; };
  w.tok_embeddings = at(WeightPart::kEmbed, -1);
  w.final_norm = at(WeightPart::kFinalNorm, -1);
  w.lm_head = config.tie_word_embeddings ? w.tok_embeddings : at(WeightPart::kLmHead, -1);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    CudaLayerWeights lw;
    lw.attn_norm = at(WeightPart::kAttnNorm, l);
    lw.wqkv = at(WeightPart::kWq, l);
    lw.bqkv = config.attention_bias ? at(WeightPart::kBq, l) : nullptr;
    lw.wo = at(WeightPart::kWo, l);
    lw.ffn_norm = at(WeightPart::kFfnNorm, l);
    if (config.qk_norm) {
      lw.q_norm = at(WeightPart::kQNorm, l);
      lw.k_norm = at(WeightPart::kKNorm, l);
    }
    if (config.is_moe()) {
      lw.router = at(WeightPart::kRouter, l);
      lw.experts_gate_up = at(WeightPart::kExpertsGateUp, l);
      lw.experts_down = at(WeightPart::kExpertsDown, l);
    } else {
      lw.w_gate_up = at(WeightPart::kGate, l);
      lw.w_down = at(WeightPart::kDown, l);
    }
    w.layers.push_back(lw);
  }
  return w;
}

std::vector<uint16_t> to_bf16(const HostTensor& t) {
  std::vector<uint16_t> out(t.num_elems());
  if (t.dtype == DType::kBF16) {
    std::memcpy(out.data(), t.data.data(), out.size() * 2);
  } else {
    const std::vector<float> f = to_f32(t);
    for (size_t i = 0; i < f.size(); ++i) out[i] = f32_to_bf16(f[i]);
  }
  return out;
}

}  // namespace

int64_t cuda_weight_bytes(const ModelConfig& config) {
  return weight_layout(config).total_elems * 2;
}

CudaWeights upload_weights(const LoadedModel& model) {
  const ModelConfig& config = model.config;
  const WeightLayout layout = weight_layout(config);
  DeviceBuffer<__nv_bfloat16> storage(layout.total_elems);
  for (const WeightSegment& s : layout.segments) {
    if (s.part == WeightPart::kExpertsGateUp || s.part == WeightPart::kExpertsDown) {
      int64_t offset = s.offset;  // the experts' matrices one after the other
      for (const HostTensor* t : expert_tensors(model, s)) {
        if (t->shape.size() != 2 || t->shape[1] != s.shape[2])
          fail(ErrorCode::kInvalidFile, "{}: expert tensor {} has the wrong shape", model.path, t->name);
        const std::vector<uint16_t> bf16 = to_bf16(*t);
        OPTIMATE_CUDA_CHECK(cudaMemcpy(storage.get() + offset, bf16.data(), bf16.size() * 2, cudaMemcpyHostToDevice));
        offset += static_cast<int64_t>(bf16.size());
      }
      if (offset != s.offset + s.num_elems())
        fail(ErrorCode::kInvalidFile, "{}: layer {}'s experts hold {} values, the config implies {}", model.path,
             s.layer, offset - s.offset, s.num_elems());
      continue;
    }
    const HostTensor* t = host_tensor(model, s);
    if (!t || t->empty())
      fail(ErrorCode::kNotFound, "{}: weight for layer {} part {} is missing", model.path, s.layer,
           static_cast<int>(s.part));
    if (t->shape != s.shape)
      fail(ErrorCode::kInvalidFile, "{}: tensor {} has {} dims / {} elements, expected {}",
           model.path, t->name, t->shape.size(), t->num_elems(), s.num_elems());
    const std::vector<uint16_t> bf16 = to_bf16(*t);
    OPTIMATE_CUDA_CHECK(cudaMemcpy(storage.get() + s.offset, bf16.data(), bf16.size() * 2,
                                   cudaMemcpyHostToDevice));
  }
  return bind(config, layout, std::move(storage));
}

CudaWeights make_dummy_weights(const ModelConfig& config, uint64_t seed) {
  const WeightLayout layout = weight_layout(config);
  DeviceBuffer<__nv_bfloat16> storage(layout.total_elems);
  for (const WeightSegment& s : layout.segments) {
    const DummyRange r = dummy_range(s.part);
    dummy_fill(storage.get() + s.offset, s.num_elems(), seed, s.tensor_id(), r.lo, r.hi);
  }
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  return bind(config, layout, std::move(storage));
}

LoadedModel make_dummy_model(const ModelConfig& config, uint64_t seed) {
  LoadedModel m;
  m.config = config;
  m.path = "dummy";
  const WeightLayout layout = weight_layout(config);
  m.weights.layers.resize(config.num_layers);
  for (const WeightSegment& s : layout.segments) {
    const DummyRange r = dummy_range(s.part);
    auto values = std::make_shared<std::vector<uint16_t>>(s.num_elems());
    for (size_t i = 0; i < values->size(); ++i)
      (*values)[i] = f32_to_bf16(dummy_value(seed, s.tensor_id(), i, r.lo, r.hi));
    HostTensor t;
    t.name = "dummy." + std::to_string(s.tensor_id());
    t.dtype = DType::kBF16;
    t.shape = s.shape;
    t.data = {reinterpret_cast<const uint8_t*>(values->data()), values->size() * 2};
    t.owner = values;
    ModelWeights& w = m.weights;
    LayerWeights* l = s.layer >= 0 ? &w.layers[s.layer] : nullptr;
    if (s.part == WeightPart::kExpertsGateUp || s.part == WeightPart::kExpertsDown) {
      const int64_t rows = s.shape[1];  // of one expert's stacked matrix
      l->experts.resize(static_cast<size_t>(s.shape[0]));
      for (int64_t e = 0; e < s.shape[0]; ++e) {
        ExpertWeights& x = l->experts[e];
        if (s.part == WeightPart::kExpertsDown) {
          x.w_down = stacked_matrix(t, e, 0, rows, t.name + ".down");
        } else {
          x.w_gate = stacked_matrix(t, e, 0, rows / 2, t.name + ".gate");
          x.w_up = stacked_matrix(t, e, rows / 2, rows / 2, t.name + ".up");
        }
      }
      continue;
    }
    switch (s.part) {
      case WeightPart::kEmbed: w.tok_embeddings = t; break;
      case WeightPart::kFinalNorm: w.final_norm = t; break;
      case WeightPart::kLmHead: w.lm_head = t; break;
      case WeightPart::kAttnNorm: l->attn_norm = t; break;
      case WeightPart::kWq: l->wq = t; break;
      case WeightPart::kWk: l->wk = t; break;
      case WeightPart::kWv: l->wv = t; break;
      case WeightPart::kBq: l->bq = t; break;
      case WeightPart::kBk: l->bk = t; break;
      case WeightPart::kBv: l->bv = t; break;
      case WeightPart::kWo: l->wo = t; break;
      case WeightPart::kFfnNorm: l->ffn_norm = t; break;
      case WeightPart::kGate: l->w_gate = t; break;
      case WeightPart::kUp: l->w_up = t; break;
      case WeightPart::kDown: l->w_down = t; break;
      case WeightPart::kQNorm: l->q_norm = t; break;
      case WeightPart::kKNorm: l->k_norm = t; break;
      case WeightPart::kRouter: l->router = t; break;
      case WeightPart::kExpertsGateUp:
      case WeightPart::kExpertsDown: break;
    }
  }
  if (config.tie_word_embeddings) m.weights.lm_head = m.weights.tok_embeddings;
  return m;
}

}  // namespace optimate::cuda
