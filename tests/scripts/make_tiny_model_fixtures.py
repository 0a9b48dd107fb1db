#!/usr/bin/env python3
"""Regenerates tests/data/golden/tiny_models.json: two tiny decoders with seeded random weights
and the logits Hugging Face transformers computes for them, covering what SmolLM2 does not:

  qwen2_bias:   Qwen2ForCausalLM (q/k/v bias), untied lm_head
  llama3_rope:  LlamaForCausalLM with llama3 rope scaling (a frequency in the smooth band)

Each entry holds the config.json dict, every weight (Hugging Face names, row-major), the prompt
ids and the fp32 logits of every prompt position (the vocabulary is 64 ids).

Usage: python tests/scripts/make_tiny_model_fixtures.py   (needs torch, transformers)
"""
import json
import pathlib

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

COMMON = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
)


def build(kind):
    torch.manual_seed({"qwen2_bias": 1, "llama3_rope": 2}[kind])
    if kind == "qwen2_bias":
        cfg = Qwen2Config(**COMMON, rope_theta=10000.0, tie_word_embeddings=False)
        model = Qwen2ForCausalLM(cfg)
    else:
        cfg = LlamaConfig(
            **COMMON,
            rope_theta=10000.0,
            tie_word_embeddings=True,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 128,
            },
        )
        model = LlamaForCausalLM(cfg)
    # Random init gives tiny weights; widen them so every path moves the logits visibly.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    model.eval()
    return cfg, model


def main():
    out = pathlib.Path(__file__).resolve().parents[1] / "data/golden/tiny_models.json"
    entries = {}
    for kind in ["qwen2_bias", "llama3_rope"]:
        cfg, model = build(kind)
        prompt = [(7 * i + 3) % 64 for i in range(40)]
        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0]
        weights = {}
        for name, t in model.state_dict().items():
            if name == "lm_head.weight" and cfg.tie_word_embeddings:
                continue
            # Shortest decimal that reads back as the same fp32 value: both sides use identical weights.
            values = [float(np.format_float_positional(v, unique=True)) for v in t.numpy().flatten()]
            weights[name] = {"shape": list(t.shape), "values": values}
        config = cfg.to_dict()
        config["architectures"] = [type(model).__name__]
        entries[kind] = {
            "config": config,
            "weights": weights,
            "prompt_ids": prompt,
            "logits": [[round(float(v), 6) for v in row] for row in logits],
        }
    out.write_text(json.dumps(entries, separators=(",", ":"), default=str) + "\n")
    print("wrote", out, out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
