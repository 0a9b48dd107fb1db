#!/usr/bin/env python3
"""Regenerates tests/data/golden/sampling_processors.json: the sampling distributions that
Hugging Face's logits processors give for a few random logits rows, so the C++ sampler's
penalties and truncation rules are checked against the reference implementation.

Each case applies, in Hugging Face's order, RepetitionPenaltyLogitsProcessor (over the
prompt + output ids), TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper and
MinPLogitsWarper, then softmax. Also records torch.log_softmax of the processed logits
(top 5) for the logprobs check.

Usage: python tests/scripts/make_sampling_fixtures.py   (needs torch, transformers)
"""
import json
import pathlib

import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

VOCAB = 64
CASES = [
    {"temperature": 1.0},
    {"temperature": 0.7},
    {"temperature": 1.3, "top_k": 5},
    {"temperature": 1.0, "top_p": 0.8},
    {"temperature": 0.8, "top_p": 0.5, "top_k": 10},
    {"temperature": 1.0, "min_p": 0.1},
    {"temperature": 1.5, "top_k": 20, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 1.0, "repetition_penalty": 1.3},
    {"temperature": 0.9, "repetition_penalty": 0.8, "top_p": 0.95},
    {"temperature": 1.0, "repetition_penalty": 2.0, "top_k": 8, "min_p": 0.02},
]


def main():
    out = pathlib.Path(__file__).resolve().parents[1] / "data/golden/sampling_processors.json"
    gen = torch.Generator().manual_seed(1234)
    cases = []
    for i, params in enumerate(CASES):
        logits = torch.randn(VOCAB, generator=gen) * 3.0
        logits = logits.to(torch.float32)
        prompt_ids = torch.randint(0, VOCAB, (6,), generator=gen).tolist()
        output_ids = torch.randint(0, VOCAB, (4,), generator=gen).tolist()
        history = torch.tensor([prompt_ids + output_ids])
        scores = logits.clone().unsqueeze(0)
        if params.get("repetition_penalty", 1.0) != 1.0:
            scores = RepetitionPenaltyLogitsProcessor(params["repetition_penalty"])(history, scores)
        scores = TemperatureLogitsWarper(params["temperature"])(history, scores)
        processed = scores.clone()
        if params.get("top_k"):
            scores = TopKLogitsWarper(params["top_k"])(history, scores)
        if params.get("top_p", 1.0) < 1.0:
            scores = TopPLogitsWarper(params["top_p"])(history, scores)
        if params.get("min_p"):
            scores = MinPLogitsWarper(params["min_p"])(history, scores)
        probs = torch.softmax(scores, dim=-1)[0]
        logprobs = torch.log_softmax(processed, dim=-1)[0]
        top = torch.topk(logprobs, 5)
        cases.append({
            "params": params,
            "logits": [float(v) for v in logits],
            "prompt_ids": prompt_ids,
            "output_ids": output_ids,
            "probs": [float(v) for v in probs],
            "top_logprob_ids": [int(v) for v in top.indices],
            "top_logprobs": [float(v) for v in top.values],
        })
    out.write_text(json.dumps({"vocab_size": VOCAB, "cases": cases}) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
