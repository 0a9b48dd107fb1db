#!/usr/bin/env python3
"""Regenerates tests/data/model/ from the reference implementations (gguf-py, transformers).

    /opt/refenv/bin/python tests/scripts/make_model_fixtures.py [--models models]

Needs torch, transformers, gguf, safetensors and accelerate (transformers' GGUF loading
requires it). Seeded: rerunning reproduces the files byte for byte.

Writes:
  dequant.json           raw blocks of every supported GGML type + gguf-py's dequantization
  rope.json              inverse rotary frequencies from transformers' ROPE_INIT_FUNCTIONS
  tiny_llama/            tiny random LlamaForCausalLM, fp16, tied embeddings, one file
  tiny_llama_sharded/    the same kind of model, bf16, untied, sharded with an index
  tiny_qwen2/            tiny random Qwen2ForCausalLM, fp32 (q/k/v biases)
  tiny_llama.gguf        tiny_llama_sharded's weights in GGUF, Q/K permuted as llama.cpp's
                         converter does, with transformers' view of it in tiny_llama_gguf.json
  smollm2_reference.json what transformers reads from the SmolLM2 GGUF (skipped if absent)
and the fuzzers' seed corpora, fuzz/corpus/{gguf,safetensors}/: tiny valid files.
Each model directory carries expected.json: per tensor, its shape and a few values from torch.
"""
import argparse
import json
import math
import os
import pathlib
import shutil

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as Q

OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "model"
RNG = np.random.default_rng(20240601)


def f16_bits(values):
    return np.asarray(values, dtype=np.float16).view(np.uint16)


def random_blocks(qtype, n_blocks):
    """Random bytes with every fp16 scale field set to a finite, moderate value."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = RNG.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    scale_offsets = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2],
                     Q.Q6_K: [block_bytes - 2]}[qtype]
    for off in scale_offsets:
        scales = f16_bits(RNG.uniform(-0.05, 0.05, size=n_blocks))
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw


def dequant_fixtures():
    cases = {}
    # Plain types: every finite bit pattern class (normals, subnormals, signed zeros).
    f32 = RNG.standard_normal(64).astype(np.float32)
    cases["F32"] = (f32.view(np.uint8), f32)
    h = RNG.integers(0, 0x10000, size=256, dtype=np.uint16)
    h = h[((h >> 10) & 0x1F) != 0x1F][:128]
    h[:4] = [0x0000, 0x8000, 0x0001, 0x83FF]
    cases["F16"] = (h.view(np.uint8), h.view(np.float16).astype(np.float32))
    b = RNG.integers(0, 0x10000, size=256, dtype=np.uint16)
    b = b[((b >> 7) & 0xFF) != 0xFF][:128]
    b[:4] = [0x0000, 0x8000, 0x0001, 0x807F]
    cases["BF16"] = (b.view(np.uint8), gguf.quants.dequantize(b.view(np.uint8), Q.BF16))
    for name, qtype in [("Q8_0", Q.Q8_0), ("Q4_0", Q.Q4_0), ("Q4_1", Q.Q4_1), ("Q4_K", Q.Q4_K),
                        ("Q5_K", Q.Q5_K), ("Q6_K", Q.Q6_K)]:
        raw = random_blocks(qtype, 6)
        if qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1):  # also blocks as the real quantizer writes them
            values = RNG.standard_normal((2, 64)).astype(np.float32)
            quantized = gguf.quants.quantize(values, qtype).reshape(-1, raw.shape[1])
            raw = np.concatenate([raw, quantized])
        raw = raw.reshape(-1)
        cases[name] = (raw, gguf.quants.dequantize(raw, qtype).reshape(-1))
    out = {name: {"bytes_hex": raw.tobytes().hex(), "values": [float(v) for v in vals]}
           for name, (raw, vals) in cases.items()}
    (OUT / "dequant.json").write_text(json.dumps(out))


def rope_fixtures():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = {
        "default": dict(rope_theta=100000.0),
        "linear": dict(rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0}),
        "llama3": dict(rope_theta=500000.0, max_position_embeddings=131072,
                       rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192}),
    }
    out = {}
    for name, kw in cases.items():
        cfg = LlamaConfig(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=64, **kw)
        rope_type = cfg.rope_parameters["rope_type"]
        if rope_type == "default":
            inv_freq, attention_scaling = (transformers.models.llama.modeling_llama
                                           .LlamaRotaryEmbedding.compute_default_rope_parameters(cfg))
        else:
            inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
        out[name] = {"config": cfg.to_dict(), "inv_freq": [float(v) for v in inv_freq],
                     "attention_scaling": float(attention_scaling)}
    (OUT / "rope.json").write_text(json.dumps(out, default=str))


def tensor_summary(t):
    t = t.detach().to(torch.float32).reshape(-1)
    idx = sorted({0, 1, t.numel() // 2, t.numel() - 1})
    return {"index": idx, "values": [float(t[i]) for i in idx],
            "sum": float(t.double().sum())}


def save_tiny(model, name, **save_kw):
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, **save_kw)
    for extra in path.glob("generation_config.json"):
        extra.unlink()
    expected = {"tensors": {k: {"shape": list(v.shape), **tensor_summary(v)}
                            for k, v in model.state_dict().items()}}
    (path / "expected.json").write_text(json.dumps(expected, indent=1))
    return path


def tiny_models():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(7)
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
    tied = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True,
                                        rope_theta=50000.0)).to(torch.float16)
    save_tiny(tied, "tiny_llama")
    untied = LlamaForCausalLM(LlamaConfig(
        **common, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128}))
    untied = untied.to(torch.bfloat16)
    save_tiny(untied, "tiny_llama_sharded", max_shard_size="100KB")
    qwen = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False))
    save_tiny(qwen, "tiny_qwen2")
    write_tiny_gguf(LlamaForCausalLM.from_pretrained(OUT / "tiny_llama_sharded",
                                                     dtype=torch.float32))


def llama_cpp_permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py, LlamaModel.permute: Q/K rows reordered for interleaved rotary.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_tiny_gguf(model):
    cfg = model.config
    path = OUT / "tiny_llama.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = llama_cpp_permute(t, cfg.num_attention_heads, cfg.num_attention_heads)
            if gg == "attn_k":
                t = llama_cpp_permute(t, cfg.num_attention_heads, cfg.num_key_value_heads)
            if gg in ("attn_q", "attn_k", "ffn_up"):  # exercise quantized un-permutation
                shape = t.shape
                t = gguf.quants.quantize(t, Q.Q8_0)
                w.add_tensor(f"blk.{i}.{gg}.weight", t, raw_shape=t.shape, raw_dtype=Q.Q8_0)
                continue
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        OUT, gguf_file=path.name, dtype=torch.float32)
    ref = {"tensors": {k: {"shape": list(v.shape), **tensor_summary(v)}
                       for k, v in loaded.state_dict().items()
                       if "layers.0." in k or "layers.1.self_attn.k_proj" in k}}
    ref["q_proj_rows"] = rows(loaded.model.layers[0].self_attn.q_proj.weight, range(0, 64, 3))
    ref["k_proj_rows"] = rows(loaded.model.layers[1].self_attn.k_proj.weight, range(0, 32, 3))
    (OUT / "tiny_llama_gguf.json").write_text(json.dumps(ref, indent=1))


def rows(weight, row_ids):
    return {str(r): [float(v) for v in weight[r].detach()] for r in row_ids}


def smollm2_reference(models_dir):
    path = pathlib.Path(models_dir) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        print(f"skipping smollm2_reference.json: {path} absent")
        return
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32)
    c = model.config
    attn = model.model.layers[0].self_attn
    out = {
        "config": {"vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
                   "intermediate_size": c.intermediate_size,
                   "num_hidden_layers": c.num_hidden_layers,
                   "num_attention_heads": c.num_attention_heads,
                   "num_key_value_heads": c.num_key_value_heads,
                   "head_dim": getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
                   "max_position_embeddings": c.max_position_embeddings,
                   "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_parameters["rope_theta"],
                   "tie_word_embeddings": c.tie_word_embeddings, "bos_token_id": c.bos_token_id,
                   "eos_token_id": c.eos_token_id},
        "q_proj_rows": rows(attn.q_proj.weight, [0, 1, 2, 31, 32, 33, 63, 64, 100, 575]),
        "k_proj_rows": rows(attn.k_proj.weight, [0, 1, 31, 32, 63, 64, 191]),
        "v_proj_rows": rows(attn.v_proj.weight, [0, 191]),
        "embed_rows": rows(model.model.embed_tokens.weight, [0, 1, 49151]),
        "final_norm": [float(v) for v in model.model.norm.weight.detach()[:16]],
    }
    (OUT / "smollm2_reference.json").write_text(json.dumps(out))


def fuzz_corpora():
    from safetensors.torch import save_file

    root = pathlib.Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
    gdir, sdir = root / "gguf", root / "safetensors"
    for d in (gdir, sdir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)

    def gguf_seed(name, arch, alignment, tensors):
        w = gguf.GGUFWriter(str(gdir / name), arch)
        if alignment:
            w.add_custom_alignment(alignment)
        w.add_block_count(1)
        w.add_head_count(2)
        w.add_rope_freq_base(10000.0)
        w.add_token_list(["<s>", "</s>", "a"])
        w.add_token_types([3, 3, 1])
        for tname, array, qtype in tensors:
            if qtype is None:
                w.add_tensor(tname, array)
            else:
                q = gguf.quants.quantize(array, qtype)
                w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    r = np.random.default_rng(5)
    gguf_seed("f32_q8_0.gguf", "llama", None,
              [("a.weight", r.standard_normal((2, 4)).astype(np.float32), None),
               ("b.weight", r.standard_normal((2, 32)).astype(np.float32), Q.Q8_0)])
    gguf_seed("f16_q4_1_aligned.gguf", "qwen2", 64,
              [("a.weight", r.standard_normal((3,)).astype(np.float16), None),
               ("b.weight", r.standard_normal((1, 32)).astype(np.float32), Q.Q4_1)])
    save_file({"a": torch.randn(2, 3), "b": torch.randn(4, dtype=torch.float16)},
              str(sdir / "f32_f16.safetensors"))
    save_file({"w": torch.randn(2, 2, dtype=torch.bfloat16)}, str(sdir / "bf16_meta.safetensors"),
              metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=str(pathlib.Path(__file__).resolve().parents[2] / "models"))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    dequant_fixtures()
    rope_fixtures()
    tiny_models()
    smollm2_reference(args.models)
    fuzz_corpora()


if __name__ == "__main__":
    main()
