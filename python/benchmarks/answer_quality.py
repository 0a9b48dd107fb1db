"""Answer quality of the embedded model under each CPU activation path and sampling preset, on
a held-out set of short factual questions (held_out_questions.json: none of them appears in the
README or in a test). Each question goes through the model's chat template; an answer counts
as right when it contains one of the expected words (case-insensitive). Sampled presets draw
`--samples` answers per question with seeds 0..N-1; greedy draws one.

    PYTHONPATH=build/python .venv/bin/python python/benchmarks/answer_quality.py \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf

Prints a Markdown table: preset, activation path, share of right answers, and how often the two
activation paths gave the same greedy answer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from optimate import LLM, SamplingParams, set_log_level

PRESETS = {
    "greedy (temperature 0)": dict(temperature=0.0),
    "temperature 1 (OpenAI's default)": dict(temperature=1.0),
    "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama.cpp's defaults)":
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "temperature 0.2, top_p 0.9 (the SmolLM2 model card)": dict(temperature=0.2, top_p=0.9),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--num-threads", type=int, default=0)
    args = parser.parse_args()
    set_log_level("error")
    questions = json.loads(Path(__file__).with_name("held_out_questions.json").read_text())
    chats = [[{"role": "user", "content": q["question"]}] for q in questions]
    greedy_text = {}
    print("| preset | activations | right answers | of |")
    print("|---|---|---:|---:|")
    for activations in ("q8", "f32"):
        llm = LLM(model=args.model, device="cpu", cpu_activations=activations, num_threads=args.num_threads,
                  kv_cache_memory="512MiB", max_model_len=1024)
        for name, preset in PRESETS.items():
            draws = 1 if preset["temperature"] == 0 else args.samples
            params, expected, convs = [], [], []
            for q, chat in zip(questions, chats):
                for seed in range(draws):
                    params.append(SamplingParams(max_tokens=args.max_tokens, seed=seed, **preset))
                    expected.append([a.lower() for a in q["answer"]])
                    convs.append(chat)
            outputs = llm.chat(convs, params, use_tqdm=False)
            texts = [o.outputs[0].text for o in outputs]
            right = sum(any(a in t.lower() for a in e) for e, t in zip(expected, texts))
            if draws == 1:
                greedy_text[activations] = texts
            print(f"| {name} | {activations} | {right / len(texts):.0%} | {len(texts)} |", flush=True)
    same = sum(a == b for a, b in zip(greedy_text["q8"], greedy_text["f32"]))
    print(f"\nGreedy answers identical on both activation paths: {same} of {len(questions)}.")
    for q, a, b in zip(questions, greedy_text["q8"], greedy_text["f32"]):
        if a != b:
            print(f"- {q['question']!r}: q8 {a!r} / f32 {b!r}")


if __name__ == "__main__":
    main()
