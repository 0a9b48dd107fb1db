"""Regenerates tests/data/bench/stats.json: reference statistics computed with numpy the way
`vllm bench serve` computes them (vllm/benchmarks/serve.py, calculate_metrics): np.mean,
np.median, np.std and np.percentile with numpy's default "linear" interpolation.

Run: /opt/refenv/bin/python tests/scripts/make_bench_fixtures.py
"""
import json
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "bench" / "stats.json"
PS = [0, 1, 25, 50, 90, 95, 99, 99.9, 100]


def samples():
    rng = np.random.default_rng(1234)
    yield "single", [42.0]
    yield "pair", [1.0, 3.0]
    yield "unsorted_ints", [7.0, 1.0, 5.0, 3.0, 9.0, 2.0]
    yield "ties", [2.0, 2.0, 2.0, 5.0, 5.0, 11.0, 11.0, 11.0, 11.0]
    yield "lognormal_997", rng.lognormal(3.0, 0.8, 997).round(6).tolist()
    yield "uniform_100", rng.uniform(0.0, 50.0, 100).round(6).tolist()


def requests():
    """Per-request timings (s) of a small run, and the metrics vllm's formulas give."""
    rng = np.random.default_rng(99)
    reqs = []
    for i in range(40):
        arrival = round(float(i * 0.05), 6)
        n_out = int(rng.integers(1, 12))
        ttft = round(float(rng.uniform(0.01, 0.3)), 6)
        gaps = rng.uniform(0.005, 0.04, n_out - 1).round(6)
        times = (arrival + ttft + np.concatenate([[0.0], np.cumsum(gaps)])).round(6).tolist()
        reqs.append({"arrival_s": arrival, "token_times_s": times, "output_tokens": n_out,
                     "prompt_tokens": int(rng.integers(5, 300)), "success": i % 13 != 5})
    ok = [r for r in reqs if r["success"]]
    ttft = [(r["token_times_s"][0] - r["arrival_s"]) * 1e3 for r in ok]
    e2el = [(r["token_times_s"][-1] - r["arrival_s"]) * 1e3 for r in ok]
    tpot = [(e - t) / (r["output_tokens"] - 1) for r, t, e in zip(ok, ttft, e2el)
            if r["output_tokens"] > 1]
    itl = [(b - a) * 1e3 for r in ok for a, b in zip(r["token_times_s"], r["token_times_s"][1:])]
    duration = max(r["token_times_s"][-1] for r in ok)
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r["prompt_tokens"] for r in ok)

    def stats(x):
        return {"mean": float(np.mean(x)), "median": float(np.median(x)), "std": float(np.std(x)),
                "p95": float(np.percentile(x, 95)), "p99": float(np.percentile(x, 99))}

    expected = {
        "completed": len(ok), "failed": len(reqs) - len(ok), "duration_s": duration,
        "request_throughput": len(ok) / duration, "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "ttft_ms": stats(ttft), "tpot_ms": stats(tpot), "itl_ms": stats(itl), "e2el_ms": stats(e2el),
    }
    return reqs, expected


def main():
    cases = []
    for name, values in samples():
        cases.append({"name": name, "values": values,
                      "percentiles": {str(p): float(np.percentile(values, p)) for p in PS},
                      "mean": float(np.mean(values)), "std": float(np.std(values)),
                      "median": float(np.median(values))})
    reqs, expected = requests()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"numpy": np.__version__, "cases": cases,
                               "run": {"requests": reqs, "expected": expected}}, indent=1))


if __name__ == "__main__":
    main()
