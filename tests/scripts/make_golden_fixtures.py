#!/usr/bin/env python3
"""Regenerates tests/data/golden/smollm2_golden.json: reference logits and greedy continuations
of SmolLM2-135M-Instruct (Q4_1 GGUF) from Hugging Face transformers, which dequantizes the
GGUF weights to fp32 and runs its own LlamaForCausalLM.

Token ids are frozen in the fixture so the C++ test does not depend on the tokenizer. For every
prompt position the fixture keeps the top-20 logits (values and ids) and the full-vocabulary
maximum; the greedy continuation (64 tokens, EOS not special-cased) is recorded with the margin
between the best and second-best logit at each step so a near-tie is visible when a test fails.

Needs torch, transformers, gguf and accelerate (transformers refuses GGUF without it).
Usage: python tests/scripts/make_golden_fixtures.py [--models-dir models]
"""
import argparse
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOP_N = 20
NEW_TOKENS = 64

PROMPTS = [
    ("plain_short", "The capital of France is", False),
    ("plain_story", "Once upon a time, in a small village by the sea, there lived an old fisherman who", False),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("chat_quantum", "Explain quantum computing in two sentences.", True),
    ("chat_list", "List three fruits that are red, one per line.", True),
    ("numbers", "1, 2, 3, 5, 8, 13, 21,", False),
]


def main():
    ap = argparse.ArgumentParser()
    root = pathlib.Path(__file__).resolve().parents[2]
    ap.add_argument("--models-dir", default=str(root / "models"))
    ap.add_argument("--out", default=str(root / "tests/data/golden/smollm2_golden.json"))
    args = ap.parse_args()

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.models_dir, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(args.models_dir, gguf_file=GGUF, dtype=torch.float32)
    model.eval()

    cases = []
    for name, text, chat in PROMPTS:
        if chat:
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            if hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            ids = tok(text, add_special_tokens=False)["input_ids"]
        ids = [int(i) for i in ids]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]  # (len, vocab)
        top = torch.topk(logits, TOP_N, dim=-1)
        positions = []
        for p in range(len(ids)):
            positions.append({
                "top_ids": [int(i) for i in top.indices[p]],
                "top_logits": [round(float(v), 6) for v in top.values[p]],
                "max_logit": round(float(logits[p].max()), 6),
            })

        # Greedy decode with the KV cache, exactly max-new-tokens steps (EOS not special-cased).
        generated, margins = [], []
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            past, last = out.past_key_values, out.logits[0, -1]
            for _ in range(NEW_TOKENS):
                t2 = torch.topk(last, 2)
                nxt = int(t2.indices[0])
                generated.append(nxt)
                margins.append(round(float(t2.values[0] - t2.values[1]), 6))
                out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past, last = out.past_key_values, out.logits[0, -1]
        cases.append({
            "name": name,
            "text": text,
            "chat": chat,
            "prompt_ids": ids,
            "positions": positions,
            "greedy_ids": generated,
            "greedy_margins": margins,
            "greedy_text": tok.decode(generated),
        })
        print(f"{name}: {len(ids)} prompt tokens; min greedy margin {min(margins):.4f}; {tok.decode(generated)!r}")

    fixture = {
        "model": GGUF,
        "reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, fp32",
        "top_n": TOP_N,
        "vocab_size": int(model.config.vocab_size),
        "cases": cases,
    }
    pathlib.Path(args.out).write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
