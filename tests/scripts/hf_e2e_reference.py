#!/usr/bin/env python3
"""Reference for the GPU end-to-end test (tests/cuda/hf_e2e_test.cpp), run on the GPU machine.

Builds a Llama-3-shaped LlamaForCausalLM with seeded random bf16 weights, saves it as a
Hugging Face directory (config.json + safetensors), and writes what transformers computes on it:
  prompts.json     {"prompts": [[ids]], "greedy": [[32 ids]], "layers": N, "fp32": bool}
                   greedy: transformers' generate() in fp32 on the same bf16-rounded weights
  logits_bf16.bin  fp32 logits of every prompt position, transformers in bf16 (the peer)
  logits_fp32.bin  the same with the bf16 weights upcast to fp32 (the precise reference)
Rows are prompt after prompt, position after position, vocab floats each.

Why this init. With every matrix at N(0, 0.02) (transformers' default) the logits are Gaussian
and unstructured: the top-1/top-2 gap is an extreme-value gap of about sigma/sqrt(2 ln V) with
most of its density near 0, so rounding the final hidden state to bf16 alone flips top-1 at
about 1% of positions and greedy runs split at the first near-tie in any bf16 engine
(transformers' own bf16 and fp32 disagreed on 6%). Scaling lm_head does not help: it scales the
gaps and the rounding error alike. A trained model is decisive because its final hidden state
points at one unembedding row. This init builds that in: the embeddings are larger
(std sqrt(layers / 2), so the token's embedding keeps about 1/15 of the residual's power whatever
the depth) and lm_head row pi(u) is embedding row u times 0.02 / that std, for a seeded
permutation pi: the residual's embedding component votes for pi(current token) with a margin of
about 15 sigma of the other logits (about 20 against about 6 for the runner-up), far beyond bf16
error, while the layers still make about 14/15 of the residual, so every other logit (and the
logit tolerance the test checks) depends on attention and the MLPs. What this does not test:
that context changes the argmax; the logit tolerance covers the layers' arithmetic.

  python3 tests/scripts/hf_e2e_reference.py --out /tmp/hf_e2e_2 --layers 2
"""
import argparse, json, math, os, random

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

INIT_STD = 0.02  # transformers' initializer_range, for every matrix but the embeddings


def make_config(layers, vocab=128256):
    return LlamaConfig(vocab_size=vocab, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


@torch.no_grad()
def init_decisive(model, cfg, seed):
    """Seeded init with decisive predictions (see the module doc); returns the permutation pi."""
    gen = torch.Generator(device=model.device).manual_seed(seed)
    embed_std = math.sqrt(cfg.num_hidden_layers / 2)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=p.device))
        elif name.endswith("embed_tokens.weight"):
            p.copy_(embed_std * torch.randn(p.shape, generator=gen, device=p.device))
        elif not name.endswith("lm_head.weight"):
            p.copy_(INIT_STD * torch.randn(p.shape, generator=gen, device=p.device))
    embed = model.model.embed_tokens.weight
    perm = torch.randperm(cfg.vocab_size, generator=gen, device=embed.device)
    lm_head = torch.empty_like(embed, dtype=torch.float32)
    lm_head[perm] = embed.float() * (INIT_STD / embed_std)
    model.lm_head.weight.copy_(lm_head)
    return perm


def decisiveness(logits, ids, perm):
    """Share of positions whose top-1 is pi(token), and the smallest top-1/top-2 gap."""
    top2 = logits.float().topk(2, dim=-1).values
    gap = (top2[:, 0] - top2[:, 1]).min().item()
    hits = (logits.argmax(-1) == perm[ids]).float().mean().item()
    return hits, gap, logits.float().std().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt-lens", default="64,37,100,17")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fp32", action="store_true", help="skip the fp32 reference (large configs)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = make_config(a.layers)
    torch.manual_seed(a.seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    perm = init_decisive(model, cfg, a.seed)
    model.eval()
    model.save_pretrained(a.out, safe_serialization=True)

    rng = random.Random(a.seed)
    prompts = [[rng.randrange(0, cfg.vocab_size) for _ in range(int(n))] for n in a.prompt_lens.split(",")]
    g = GenerationConfig(max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, do_sample=False,
                         pad_token_id=0, eos_token_id=None)

    def dump(path, label):
        with torch.inference_mode(), open(os.path.join(a.out, path), "wb") as f:
            for p in prompts:
                ids = torch.tensor([p], device="cuda")
                logits = model(ids).logits[0]
                f.write(logits.float().cpu().numpy().tobytes())
                hits, gap, std = decisiveness(logits, ids[0], perm)
                print(f"{label} prompt of {len(p)}: top-1 = pi(token) at {100 * hits:.1f}% of "
                      f"positions, smallest top-1/top-2 gap {gap:.3f}, logit std {std:.3f}")

    dump("logits_bf16.bin", "bf16")
    greedy = []
    if not a.no_fp32:
        model = model.float()
        dump("logits_fp32.bin", "fp32")
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([p], device="cuda")
                out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=g)
                greedy.append(out[0, len(p):].tolist())
    with open(os.path.join(a.out, "prompts.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy": greedy, "layers": a.layers,
                   "fp32": not a.no_fp32}, f)
    print(f"wrote {a.out}: {len(prompts)} prompts, {sum(map(len, prompts))} positions")


if __name__ == "__main__":
    main()
