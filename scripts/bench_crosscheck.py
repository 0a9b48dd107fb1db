"""Runs one workload with `optimate bench --url` and with AIPerf against one
`optimate serve`, and prints their headline metrics side by side (see bench-crosscheck.sh).

Both tools send the same prompt texts (each checked to be exactly PROMPT_TOKENS tokens with the
server's /tokenize) with max_tokens = OUTPUT_TOKENS, ignore_eos, temperature 0, streaming with
include_usage, NUM_REQUESTS in all, sent at a constant RATE (ARRIVAL=constant) or keeping
CONCURRENCY in flight (ARRIVAL=closed); token counts come from the
server's usage chunk in both. The server runs without prefix caching (the second tool would find
the first one's prompts cached) and, where there are cores to spare, apart from the tools. Next
to each tool's figures the table shows the server's own means over the same run (/metrics), so a
disagreement can be told apart from the server running slower in one of the runs.
Standard library only: AIPerf runs from its own venv."""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_NAME = "smollm2"
WORDS = ("the of and to in is was for on that with as by at from his her they this had have "
         "not are but one all were when there can an which their said if will each about how up "
         "out them then she many some so these would other into has more two time like see no "
         "way could people my than first water been who its now long down day did get come made "
         "may part over new sound take only little work know place year live me back give most "
         "very after thing our just name good sentence man think say great where help through "
         "much before line right too mean old any same tell boy follow came want show also around "
         "form three small set put end does another well large must big even such because turn "
         "here why ask went men read need land different home us move try kind hand picture again "
         "change off play spell air away animal house point page letter mother answer found study "
         "still learn should world high every near add food between own below country plant last "
         "school father keep tree never start city earth eye light thought head under story saw").split()


def env_int(name, default):
    return int(os.environ.get(name, default))


def post_json(url, body, timeout=600.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinning():
    """(server prefix, client prefix): on a machine with few cores the load tools' own CPU use
    would slow the CPU server, unevenly between tools (AIPerf runs several Python processes);
    the server gets core 0 and one thread, the tools the other cores."""
    n = os.cpu_count() or 1
    if os.environ.get("PIN", "1") == "0" or n < 2:
        return [], []
    return ["taskset", "-c", "0"], ["taskset", "-c", f"1-{n - 1}"]


def start_server(binary, model, out, prefix):
    port = free_port()
    log = open(out / "serve.log", "w")
    threads = ["--num-threads", "1", "--http-threads", "1"] if prefix else []
    # Both tools send the same prompts: with prefix caching the second would find them cached.
    proc = subprocess.Popen([*prefix, binary, "serve", *threads, "--no-enable-prefix-caching", "--model", model, "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", MODEL_NAME, "--seed", "7", "--kv-cache-memory", "1GiB"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"optimate serve exited with {proc.returncode}; see {out / 'serve.log'}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    sys.exit("optimate serve did not become healthy")


def count_tokens(url, text):
    return post_json(url + "/tokenize", {"model": MODEL_NAME, "prompt": text, "add_special_tokens": True})["count"]


def make_prompts(url, n, num_tokens, seed=11):
    """Texts of exactly num_tokens tokens for the served model: single-token words, each with a
    leading space, checked (and trimmed or extended) against the server's own tokenizer."""
    words = [w for w in WORDS if count_tokens(url, " " + w) == 1]
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        picked = [rng.choice(words) for _ in range(num_tokens)]
        for _ in range(4 * num_tokens):
            text = "".join(" " + w for w in picked)
            have = count_tokens(url, text)
            if have == num_tokens:
                break
            if have > num_tokens:
                picked.pop()
            else:
                picked.append(rng.choice(words))
        else:
            sys.exit(f"could not build a prompt of exactly {num_tokens} tokens")
        prompts.append(text)
    return prompts


SERVER_HISTOGRAMS = {"mean_ttft_ms": "vllm:time_to_first_token_seconds",
                     "mean_tpot_ms": "vllm:time_per_output_token_seconds",
                     "mean_itl_ms": "vllm:inter_token_latency_seconds",
                     "mean_e2e_ms": "vllm:e2e_request_latency_seconds"}


def scrape(url):
    """{series: value} of the _sum and _count samples of the server's latency histograms."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name.endswith(("_sum", "_count")) and name.rsplit("_", 1)[0] in SERVER_HISTOGRAMS.values():
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def server_means(before, after):
    """The server's own mean latencies over one run: histogram sums and counts, after - before."""
    means = {}
    for key, name in SERVER_HISTOGRAMS.items():
        count = after.get(name + "_count", 0) - before.get(name + "_count", 0)
        total = after.get(name + "_sum", 0) - before.get(name + "_sum", 0)
        means[key] = total / count * 1e3 if count else float("nan")
    return means


def warm_up(url, prompts, output_tokens):
    for p in prompts[:2]:
        post_json(url + "/v1/completions", {"model": MODEL_NAME, "prompt": p, "max_tokens": min(8, output_tokens),
                                            "ignore_eos": True, "temperature": 0})


def run_optimate(binary, url, prompts, cfg, out, prefix):
    trace = out / "prompts-optimate.jsonl"
    trace.write_text("".join(json.dumps({"prompt": p, "max_tokens": cfg["output_tokens"]}) + "\n" for p in prompts))
    workload = out / "workload.toml"
    workload.write_text(f"""[workload]
name = "crosscheck"
num_requests = {cfg['num_requests']}
ignore_eos = true
[workload.arrival]
kind = "{cfg['arrival']}"
concurrency = {cfg['concurrency']}
rate = {cfg['rate']}
[workload.trace]
path = "{trace.name}"
format = "plain"
""")
    report = out / "optimate"
    cmd = [*prefix, binary, "bench", "--workload", str(workload), "--url", url, "--label", "optimate-bench",
           "--out", str(report)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    s = json.loads((report / "report.json").read_text())["runs"][0]["summary"]
    return cmd, {
        "completed": s["completed"], "failed": s["failed"],
        "mean_prompt_tokens": s["total_input_tokens"] / max(1, s["completed"]),
        "mean_output_tokens": s["total_output_tokens"] / max(1, s["completed"]),
        "duration_s": s["duration_s"],
        "request_throughput": s["request_throughput"], "output_throughput": s["output_throughput"],
        "mean_ttft_ms": s["ttft_ms"]["mean"], "median_ttft_ms": s["ttft_ms"]["median"],
        "mean_tpot_ms": s["tpot_ms"]["mean"], "mean_itl_ms": s["itl_ms"]["mean"],
        "mean_e2e_ms": s["e2el_ms"]["mean"],
    }


def run_aiperf(aiperf, url, prompts, cfg, out, prefix):
    data = out / "prompts-aiperf.jsonl"
    data.write_text("".join(json.dumps({"text": p, "output_length": cfg["output_tokens"]}) + "\n" for p in prompts))
    artifacts = out / "aiperf"
    tokenizer = ROOT / "models" / "llama3-tokenizer"  # only loaded: token counts come from the server
    cmd = [*prefix, aiperf, "profile", "--model", MODEL_NAME, "--url", url, "--endpoint-type", "completions", "--streaming",
           "--input-file", str(data), "--custom-dataset-type", "single_turn",
           *(["--concurrency", str(cfg["concurrency"])] if cfg["arrival"] == "closed"
             else ["--request-rate", str(cfg["rate"]), "--arrival-pattern", "constant"]),
           "--request-count", str(cfg["num_requests"]),
           "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0",
           "--use-server-token-count", "--use-legacy-max-tokens", "--tokenizer", str(tokenizer),
           "--output-artifact-dir", str(artifacts), "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none"]
    with open(out / "aiperf.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    j = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    avg = lambda key: j[key]["avg"]
    return cmd, {
        "completed": int(avg("request_count")),
        "failed": int(avg("completed_request_count") - avg("request_count")),
        "mean_prompt_tokens": avg("input_sequence_length"), "mean_output_tokens": avg("output_sequence_length"),
        "duration_s": avg("benchmark_duration"),
        "request_throughput": avg("request_throughput"), "output_throughput": avg("output_token_throughput"),
        "mean_ttft_ms": avg("time_to_first_token"), "median_ttft_ms": j["time_to_first_token"]["p50"],
        # AIPerf's "inter token latency" is per request (latency - TTFT) / (tokens - 1): vllm's TPOT.
        "mean_tpot_ms": avg("inter_token_latency"), "mean_itl_ms": avg("inter_chunk_latency"),
        "mean_e2e_ms": avg("request_latency"),
    }


ROWS = [
    ("request throughput (req/s)", "request_throughput"),
    ("output token throughput (tok/s)", "output_throughput"),
    ("mean TTFT (ms)", "mean_ttft_ms"),
    ("median TTFT (ms)", "median_ttft_ms"),
    ("mean TPOT (ms) [AIPerf: inter_token_latency]", "mean_tpot_ms"),
    ("mean ITL (ms) [AIPerf: inter_chunk_latency]", "mean_itl_ms"),
    ("mean E2E latency (ms)", "mean_e2e_ms"),
]


def table(ours, theirs, version):
    """Client figures side by side; next to each, the server's own mean over the same run, which
    tells a measuring difference (client columns differ, server columns agree) from the server
    running slower during one of the runs (both differ alike)."""
    lines = [f"| metric | optimate bench | AIPerf {version} | difference | within 10% | server during optimate bench "
             "| server during AIPerf |", "|---|---:|---:|---:|---|---:|---:|"]
    for label, key in ROWS:
        a, b = ours[key], theirs[key]
        diff = (b - a) / a * 100 if a else float("nan")
        sa, sb = (f"{x['server'][key]:.2f}" if key in x["server"] else "" for x in (ours, theirs))
        lines.append(f"| {label} | {a:.2f} | {b:.2f} | {diff:+.1f}% | {'yes' if abs(diff) <= 10 else 'NO'} | {sa} | {sb} |")
    lines.append(f"| requests completed / failed | {ours['completed']} / {ours['failed']} | "
                 f"{theirs['completed']} / {theirs['failed']} | | | | |")
    lines.append(f"| mean prompt / output tokens | {ours['mean_prompt_tokens']:.1f} / {ours['mean_output_tokens']:.1f} | "
                 f"{theirs['mean_prompt_tokens']:.1f} / {theirs['mean_output_tokens']:.1f} | | | | |")
    lines.append(f"| duration (s) | {ours['duration_s']:.1f} | {theirs['duration_s']:.1f} | | | | |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aiperf", required=True)
    args = ap.parse_args()
    cfg = {"arrival": os.environ.get("ARRIVAL", "constant"), "rate": float(os.environ.get("RATE", "0.5")),
           "num_requests": env_int("NUM_REQUESTS", 64), "concurrency": env_int("CONCURRENCY", 8),
           "prompt_tokens": env_int("PROMPT_TOKENS", 128), "output_tokens": env_int("OUTPUT_TOKENS", 64)}
    if cfg["arrival"] not in ("closed", "constant"):
        sys.exit(f"ARRIVAL must be closed or constant, got {cfg['arrival']}")
    rounds = env_int("ROUNDS", 1)
    binary = str((ROOT / os.environ.get("OPTIMATE_BIN", "build/optimate")).resolve())
    model = str((ROOT / os.environ.get("OPTIMATE_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")).resolve())
    out = (ROOT / os.environ.get("OUT", "bench-results/crosscheck")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.aiperf, "--version"], capture_output=True, text=True).stdout.strip().split()[-1]

    server_prefix, client_prefix = pinning()
    proc, url = start_server(binary, model, out, server_prefix)
    try:
        prompts = make_prompts(url, cfg["num_requests"], cfg["prompt_tokens"])
        warm_up(url, prompts, cfg["output_tokens"])
        results = []
        for r in range(rounds):
            order = ["optimate", "aiperf"] if r % 2 == 0 else ["aiperf", "optimate"]
            got = {}
            for tool in order:
                d = out / f"round{r + 1}"
                d.mkdir(exist_ok=True)
                started, before = time.monotonic(), scrape(url)
                cmd, got[tool] = (run_optimate(binary, url, prompts, cfg, d, client_prefix) if tool == "optimate"
                                  else run_aiperf(args.aiperf, url, prompts, cfg, d, client_prefix))
                got[tool]["server"] = server_means(before, scrape(url))
                print(f"round {r + 1}: {tool} took {time.monotonic() - started:.0f} s: {' '.join(cmd)}", file=sys.stderr)
            results.append(got)
            print(f"\nRound {r + 1} ({' then '.join(order)}), {cfg}:\n")
            print(table(got["optimate"], got["aiperf"], version))
        (out / "crosscheck.json").write_text(json.dumps({"config": cfg, "aiperf_version": version,
                                                         "server": [*server_prefix, "optimate serve"],
                                                         "rounds": results}, indent=1))
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
