#!/usr/bin/env python3
"""Regenerates the Qwen3, Qwen3-MoE and Mixtral fixtures: tiny random-weight models, saved both
as Hugging Face directories (transformers' save_pretrained) and as GGUF files written with
gguf-py from the same weights, and what transformers computes on them.

    /work/hfenv/bin/python tests/scripts/make_qwen3_mixtral_fixtures.py

Needs torch, transformers, safetensors and gguf (gguf-py). Seeded: a rerun reproduces the files.

Writes, under tests/data/model/:
  tiny_qwen3/            Qwen3ForCausalLM, tied embeddings, head_dim 64 != hidden / heads
  tiny_qwen3_untied/     the same architecture with an untied lm_head
  tiny_qwen3_moe/        Qwen3MoeForCausalLM, 4 experts, top-2, norm_topk_prob true
  tiny_qwen3_moe_ties/   Qwen3MoeForCausalLM, norm_topk_prob false, experts 1 and 2 (router rows
                         and weights) identical, so every token's router ties them
  tiny_mixtral/          MixtralForCausalLM, 4 experts, top-2
each holding config.json, model.safetensors (bf16) and model.gguf (the same bf16 weights in
llama.cpp's layout: Mixtral as `llama` with Q/K permuted for interleaved rotary, stacked
ffn_*_exps), and tiny_qwen3/model-q8_0.gguf and tiny_qwen3_moe/model-q8_0.gguf whose attention,
MLP and expert matrices are Q8_0 (embeddings, norms and router bf16);
and tests/data/golden/qwen3_mixtral.json, per model:
  prompt_ids     32 ids
  logits         transformers in fp32 on the bf16 weights, every prompt position (vocab 256)
  q8_logits      (tiny_qwen3, tiny_qwen3_moe) transformers' own GGUF reader on model-q8_0.gguf
  greedy         for two prompts, transformers' generate() (fp32, greedy) 16 new ids, and
  greedy_margins the reference's top-1 minus top-2 logit at each of those steps
  bf16_max_error the largest |logit| difference of transformers in bf16 against fp32: the
                 error a bf16 engine's logits carry (the GPU tests bound theirs by it)
  router_margin  the smallest gap, over layers and the vocabulary, between the k-th and (k+1)-th
                 router logit relative to the largest |logit| (ties between identical experts left
                 out): the routers read a channel only the embedding writes (see
                 make_routing_decisive), so no engine's rounding flips a routing
Where transformers reads the architecture from GGUF (Qwen3, Qwen3-MoE) its logits on model.gguf
are printed against the safetensors model's: they are the same.
"""
import json
import pathlib

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from make_model_fixtures import llama_cpp_permute
from transformers import (AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

ROOT = pathlib.Path(__file__).resolve().parents[1] / "data"
MODEL_DIR = ROOT / "model"
GOLDEN = ROOT / "golden" / "qwen3_mixtral.json"

COMMON = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6,
              bos_token_id=1, eos_token_id=2)
PROMPT = [(11 * i + 5) % 256 for i in range(32)]
GREEDY_PROMPTS = [[1, 17, 99, 4, 200], [1, 250, 3, 3, 41, 77, 8]]
NEW_TOKENS = 16


def build(name):
    seed = {"tiny_qwen3": 11, "tiny_qwen3_untied": 12, "tiny_qwen3_moe": 13, "tiny_qwen3_moe_ties": 14,
            "tiny_mixtral": 15}[name]
    torch.manual_seed(seed)
    if name.startswith("tiny_qwen3_moe"):
        cfg = Qwen3MoeConfig(**COMMON, intermediate_size=96, moe_intermediate_size=32, num_experts=4,
                             num_experts_per_tok=2, norm_topk_prob=name == "tiny_qwen3_moe",
                             tie_word_embeddings=False, rope_theta=1000000.0)
        model = Qwen3MoeForCausalLM(cfg)
    elif name == "tiny_mixtral":
        common = dict(COMMON)
        common.pop("head_dim")
        common.update(num_attention_heads=1, hidden_size=64)  # head_dim = hidden / heads = 64
        cfg = MixtralConfig(**common, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                            tie_word_embeddings=False, rope_theta=1000000.0)
        model = MixtralForCausalLM(cfg)
    else:
        cfg = Qwen3Config(**COMMON, intermediate_size=96, tie_word_embeddings=name == "tiny_qwen3",
                          rope_theta=1000000.0)
        model = Qwen3ForCausalLM(cfg)
    # Random init gives tiny weights; widen them so every path moves the logits visibly (q and
    # k less: without Qwen3's q/k norms, wider ones make attention a hard argmax that any
    # rounding can move to another key).
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif pname.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
        # The weights the files hold: bf16.
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        tied = (1, 2) if name == "tiny_qwen3_moe_ties" else ()
        if moe_blocks(model):
            make_routing_decisive(model, cfg, tied)
        for layer in model.model.layers if tied else []:
            layer.mlp.experts.gate_up_proj[2].copy_(layer.mlp.experts.gate_up_proj[1])
            layer.mlp.experts.down_proj[2].copy_(layer.mlp.experts.down_proj[1])
    model.eval()
    return cfg, model


def moe_blocks(model):
    return [layer.mlp for layer in model.model.layers if hasattr(layer.mlp, "gate")]


# The router reads only the token channel: hidden features [0, TOKEN_CHANNEL), which only the
# embedding writes (the o projection's and the experts' down projections' rows there are zero),
# so a token's experts are a function of the token alone: the RMSNorm before the router scales
# the channel by a positive factor, which reorders nothing. Each router is drawn until every
# token of the vocabulary has its k-th and (k+1)-th logits apart by at least MIN_ROUTER_MARGIN of
# its largest |logit|: several times the relative rounding (2^-9) a bf16 engine puts on them, so no
# engine's rounding can change a routing (the routing weights still follow each position's
# context through that factor).
TOKEN_CHANNEL = 32
MIN_ROUTER_MARGIN = 0.015


def relative_router_margin(router, norm, embed, top_k, tied=()):
    """Smallest (k-th - (k+1)-th logit) / max |logit| over the vocabulary (the second of two tied
    experts left out: either choice computes the same)."""
    h = embed[:, :TOKEN_CHANNEL] * norm[:TOKEN_CHANNEL]
    logits = h @ router[:, :TOKEN_CHANNEL].T
    keep = [e for e in range(router.shape[0]) if e not in tied[1:]]
    values = logits[:, keep].sort(dim=-1, descending=True).values
    return ((values[:, top_k - 1] - values[:, top_k]) / values.abs().max(dim=-1).values).min().item()


def make_routing_decisive(model, cfg, tied):
    gen = torch.Generator().manual_seed(1234)
    embed = model.model.embed_tokens.weight
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[:TOKEN_CHANNEL] = 0
        layer.mlp.experts.down_proj[:, :TOKEN_CHANNEL] = 0
        router = layer.mlp.gate.weight
        for _ in range(10000):
            router.copy_((0.3 * torch.randn(router.shape, generator=gen)).to(torch.bfloat16).float())
            router[:, TOKEN_CHANNEL:] = 0
            if tied:
                router[tied[1]] = router[tied[0]]
            if relative_router_margin(router, layer.post_attention_layernorm.weight, embed,
                                      cfg.num_experts_per_tok, tied) >= MIN_ROUTER_MARGIN:
                break
        else:
            raise SystemExit("no router clears the margin")


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def greedy(model, prompt):
    """The greedy continuation, each step's top-1 minus top-2 logit, and the whole sequence."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             min_new_tokens=NEW_TOKENS, pad_token_id=0, eos_token_id=None)
        ids = out[0, len(prompt):].tolist()
        full = model(out[:, :-1]).logits[0, len(prompt) - 1:]
    top2 = full.topk(2, dim=-1).values
    return ids, [round(float(a - b), 6) for a, b in top2], out[0, :-1].tolist()


# --- GGUF, in llama.cpp's layout (convert_hf_to_gguf.py) -------------------------------------

def bf16_bits(t):
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def write_gguf(path, cfg, model, linear_type=None):
    """linear_type: a GGML type for the attention, MLP and expert matrices (None: bf16 like the
    rest; the embeddings, LM head, norms and router stay bf16 either way)."""
    mixtral = isinstance(model, MixtralForCausalLM)
    arch = "llama" if mixtral else ("qwen3moe" if isinstance(model, Qwen3MoeForCausalLM) else "qwen3")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    if arch != "qwen3":
        w.add_expert_count(cfg.num_experts if arch == "qwen3moe" else cfg.num_local_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
    if arch == "qwen3moe":
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        w.add_expert_weights_norm(cfg.norm_topk_prob)  # llama.cpp assumes true when absent
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)

    def bf16(name, t):
        bits = bf16_bits(t)
        w.add_tensor(name, bits, raw_shape=bits.shape, raw_dtype=Q.BF16)

    def linear(name, t):
        if linear_type is None:
            return bf16(name, t)
        q = gguf.quants.quantize(t.detach().float().numpy(), linear_type)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=linear_type)

    m = model.model
    bf16("token_embd.weight", m.embed_tokens.weight)
    bf16("output_norm.weight", m.norm.weight)
    if not cfg.tie_word_embeddings:
        bf16("output.weight", model.lm_head.weight)
    for i, layer in enumerate(m.layers):
        a = layer.self_attn
        q, k = a.q_proj.weight.detach(), a.k_proj.weight.detach()
        if mixtral:
            q = torch.from_numpy(llama_cpp_permute(q.numpy(), cfg.num_attention_heads, cfg.num_attention_heads))
            k = torch.from_numpy(llama_cpp_permute(k.numpy(), cfg.num_attention_heads, cfg.num_key_value_heads))
        bf16(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight)
        linear(f"blk.{i}.attn_q.weight", q)
        linear(f"blk.{i}.attn_k.weight", k)
        linear(f"blk.{i}.attn_v.weight", a.v_proj.weight)
        linear(f"blk.{i}.attn_output.weight", a.o_proj.weight)
        if hasattr(a, "q_norm"):
            bf16(f"blk.{i}.attn_q_norm.weight", a.q_norm.weight)
            bf16(f"blk.{i}.attn_k_norm.weight", a.k_norm.weight)
        bf16(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight)
        mlp = layer.mlp
        if hasattr(mlp, "gate"):
            inter = mlp.experts.down_proj.shape[-1]
            gate_up = mlp.experts.gate_up_proj.detach()
            bf16(f"blk.{i}.ffn_gate_inp.weight", mlp.gate.weight)
            linear(f"blk.{i}.ffn_gate_exps.weight", gate_up[:, :inter])
            linear(f"blk.{i}.ffn_up_exps.weight", gate_up[:, inter:])
            linear(f"blk.{i}.ffn_down_exps.weight", mlp.experts.down_proj.detach())
        else:
            linear(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight)
            linear(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight)
            linear(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_logits(directory, gguf_name, cfg):
    """transformers' own GGUF reader (it dequantizes) on the file, with the model's config:
    transformers does not read head_dim or the expert width from GGUF metadata. None where it
    does not know the architecture (Mixtral written as llama with experts)."""
    try:
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_name, config=cfg, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        print(f"  transformers cannot read {directory.name}/{gguf_name}: {type(e).__name__}: {str(e)[:100]}")
        return None
    return logits_of(loaded, PROMPT)


def main():
    entries = {}
    for name in ["tiny_qwen3", "tiny_qwen3_untied", "tiny_qwen3_moe", "tiny_qwen3_moe_ties", "tiny_mixtral"]:
        cfg, model = build(name)
        directory = MODEL_DIR / name
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        model.to(torch.bfloat16).save_pretrained(directory)
        for extra in directory.glob("generation_config.json"):
            extra.unlink()
        # The references come from the saved files, read back: the model object's rotary
        # frequencies went through bf16 with the rest when it was saved.
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        model.eval()
        write_gguf(directory / "model.gguf", cfg, model)

        logits = logits_of(model, PROMPT)
        bf16_model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
        bf16_error = (logits_of(bf16_model, PROMPT) - logits).abs().max().item()
        entry = {"prompt_ids": PROMPT, "logits": [[round(float(v), 5) for v in row] for row in logits],
                 "bf16_max_error": round(bf16_error, 5), "greedy": [], "greedy_margins": []}
        for prompt in GREEDY_PROMPTS:
            ids, margins, _ = greedy(model, prompt)
            entry["greedy"].append({"prompt": prompt, "ids": ids})
            entry["greedy_margins"].append(margins)
        if moe_blocks(model):
            tied = (1, 2) if name.endswith("ties") else ()
            entry["router_margin"] = round(min(
                relative_router_margin(layer.mlp.gate.weight, layer.post_attention_layernorm.weight,
                                       model.model.embed_tokens.weight, cfg.num_experts_per_tok, tied)
                for layer in model.model.layers), 5)
        if name in ("tiny_qwen3", "tiny_qwen3_moe"):
            write_gguf(directory / "model-q8_0.gguf", cfg, model, linear_type=Q.Q8_0)
            q8 = gguf_logits(directory, "model-q8_0.gguf", cfg)
            entry["q8_logits"] = [[round(float(v), 5) for v in row] for row in q8]
        same = gguf_logits(directory, "model.gguf", cfg)
        if same is not None:  # the bf16 GGUF holds the safetensors' weights: the same logits
            print(f"  transformers on {name}/model.gguf: max |logit diff| {(same - logits).abs().max().item():.2e}")
        entries[name] = entry
        print(f"{name}: bf16 max error {bf16_error:.4f}, router margin {entry.get('router_margin')}, "
              f"smallest greedy margin {min(min(m) for m in entry['greedy_margins']):.4f}")
    GOLDEN.write_text(json.dumps(entries, separators=(",", ":")) + "\n")
    print("wrote", GOLDEN, GOLDEN.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
