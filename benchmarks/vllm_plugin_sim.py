"""vLLM's own scheduler on a simulated GPU: FCFS, ``--scheduling-policy priority`` and
``optimate.vllm.Scheduler`` with the priority optimizer, on a workload TOML, each step priced by
the step-time model of ``optimate bench --backend sim`` (a cost profile, e.g. the calibrated H200
one) and time advanced by it.

What it adds to ``optimate bench --backend sim`` (which simulates Optimate's engine): vLLM's
admission, its recompute preemption and its prefix cache, as vLLM 0.26 runs them, so that what an
optimizer costs inside vLLM (a preempted request prefilled again) is priced, and settings can be
compared before a GPU run. Scheduling is asynchronous by default, as ``vllm serve`` runs it: the
next step is scheduled while one is on the GPU, before its tokens are known (``--sync``: one at a
time). The host's own time is left out for every scheduler alike, unless ``--host-time SCALE``
puts it in: each ``schedule()`` and ``update_from_output()`` then takes the time it took on this
machine times SCALE on the simulated clock, on one host thread (vLLM's engine core), so a step
cannot start on the GPU before it is scheduled and the host's work is hidden only while a step
runs.

A run follows one path: the optimizer's rules read the clock (how long a request has waited, how
long a victim has run), so a step that ends a little earlier or later can change what follows.
``--jitter F --seeds N`` runs every scheduler N times, each step's GPU time multiplied by a
factor drawn uniformly from [1 - F, 1 + F] (seeded 1..N, the same seeds for every scheduler),
and reports the mean of the N runs with their range.

    tests/vllm_plugin/run.sh is the environment; from the repository root:
    PYTHONPATH=build/python:tests/vllm_plugin .venv-vllm/bin/python benchmarks/vllm_plugin_sim.py \\
        --workload configs/workloads/vllm-two-class-burst.toml --set workload.num_requests=1500 \\
        --priority-options '{}' --priority-options '{"preempt_after_ms": 0}'

One row per scheduler (one per --priority-options for the plugin): output tokens per simulated
second and against the first row, each class's P99 TTFT, the mean TPOT (as clients measure it:
it includes the time a preempted request waits to run again), the mean step on the GPU,
preemptions, and the tokens (prompt and output so far) computed again after a preemption
(prefix-cache hits excluded).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from conftest import FakeClock, VllmScheduler, build_scheduler, request, write_tiny_model
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.outputs import ModelRunnerOutput

from optimate import _core
from optimate.vllm import scheduler as plugin


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def run(model_dir: str, workload: list[dict], cost: _core.CostModel, clock: FakeClock, args, label: str,
        seed: int = 0, **kw) -> dict:
    s = build_scheduler(model_dir, num_blocks=args.blocks + 1, max_num_seqs=args.seqs,
                        max_num_batched_tokens=args.budget, max_model_len=args.max_model_len,
                        prefix_caching=not args.no_prefix_caching, async_scheduling=not args.sync, **kw)
    # vLLM's engine core keeps one step in flight ahead of the one being finished when it schedules
    # asynchronously (its batch queue of two), none otherwise.
    depth = 1 if args.sync else 2
    start = clock.s
    pending = list(workload)
    arrival: dict[str, float] = {}
    klass: dict[str, str] = {}
    first_token: dict[str, float] = {}
    finished: dict[str, float] = {}
    high_water: dict[str, int] = {}  # the most tokens each request has had computed
    in_flight: list[tuple] = []      # (scheduler output, ids, sampled, end of its step on the GPU)
    gpu_free = clock.s
    num_outputs: dict[str, int] = {}
    recomputed = preemptions = output_tokens = steps = 0
    gpu_busy = 0.0
    host_s = 0.0
    rng = random.Random(seed)

    def gpu_seconds(seqs: list) -> float:
        nonlocal gpu_busy, steps
        seconds = cost.step_seconds(seqs)
        seconds *= (1 + rng.uniform(-args.jitter, args.jitter)) if args.jitter > 0 else 1
        gpu_busy += seconds
        steps += 1
        return seconds

    def host(seconds: float) -> None:  # the engine core's thread was busy this long
        nonlocal host_s
        if args.host_time > 0:
            host_s += seconds * args.host_time
            clock.ns += int(seconds * args.host_time * 1e9)
    while pending or s.has_requests() or in_flight:
        while pending and pending[0]["arrival_s"] + start <= clock.s:
            w = pending.pop(0)
            s.add_request(request(w["id"], max_tokens=w["max_tokens"], priority=w["priority"],
                                  arrival_s=start + w["arrival_s"], prompt_token_ids=w["prompt_token_ids"]))
            arrival[w["id"]] = start + w["arrival_s"]
            klass[w["id"]] = w["priority_class"]
        scheduled = False
        if s.has_requests() and len(in_flight) < depth:
            t0 = time.perf_counter()
            out = s.schedule()
            host(time.perf_counter() - t0)
            preemptions += len(out.preempted_req_ids)
            ids = list(out.num_scheduled_tokens)
            if ids:
                seqs, sampled = [], []
                for rid in ids:
                    r = s.requests[rid]
                    n = out.num_scheduled_tokens[rid]
                    context = r.num_computed_tokens - n  # the scheduler already advanced it
                    recomputed += max(min(high_water.get(rid, 0), r.num_computed_tokens) - context, 0)
                    high_water[rid] = max(high_water.get(rid, 0), r.num_computed_tokens)
                    seqs.append((n, context))
                    sampled.append([7] if r.num_computed_tokens >= r.num_tokens else [])
                gpu_free = max(gpu_free, clock.s) + gpu_seconds(seqs)
                in_flight.append((out, ids, sampled, gpu_free))
                scheduled = True
            elif not in_flight:
                s.update_from_output(out, ModelRunnerOutput(req_ids=[], req_id_to_index={}, sampled_token_ids=[]))
        if scheduled and len(in_flight) < depth:
            continue  # schedule the next step while this one runs
        if in_flight:
            out, ids, sampled, end = in_flight.pop(0)
            clock.ns = max(clock.ns, int(end * 1e9))
            runner = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                       sampled_token_ids=sampled)
            for rid, tokens in zip(ids, sampled):
                if tokens and rid not in finished:
                    output_tokens += 1
                    num_outputs[rid] = num_outputs.get(rid, 0) + 1
                    first_token.setdefault(rid, clock.s)
            t0 = time.perf_counter()
            outputs = s.update_from_output(out, runner)
            host(time.perf_counter() - t0)
            for eco in outputs.values():
                for o in eco.outputs:
                    if o.finish_reason is not None:
                        finished[o.request_id] = clock.s
        elif pending:  # idle, or nothing fits until something arrives
            clock.ns = max(clock.ns + 1_000_000, int((pending[0]["arrival_s"] + start) * 1e9))
        elif s.has_requests():
            raise AssertionError(f"{label}: requests left that no step schedules: {list(s.requests)}")
    assert len(finished) == len(workload), f"{label}: {len(workload) - len(finished)} requests never finished"
    duration = max(finished.values()) - start
    ttft = {c: [first_token[r] - arrival[r] for r in arrival if klass[r] == c] for c in set(klass.values())}
    # Time per output token after the first, as vLLM's clients measure it: it includes the time a
    # preempted request waits to run again, not only its steps.
    tpot = [(finished[r] - first_token[r]) / (num_outputs[r] - 1) for r in finished if num_outputs[r] > 1]
    return {"scheduler": label, "throughput": output_tokens / duration, "duration_s": duration,
            "ttft_p99_ms": {c: percentile(v, 0.99) * 1e3 for c, v in ttft.items()},
            "tpot_mean_ms": 1e3 * sum(tpot) / len(tpot), "step_mean_ms": 1e3 * gpu_busy / max(steps, 1),
            "preemptions": preemptions, "recomputed_tokens": recomputed, "host_s": host_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="configs/workloads/vllm-two-class-burst.toml")
    p.add_argument("--set", action="append", default=[], help="workload.KEY=VALUE")
    p.add_argument("--profile", default="profiles/h200-llama3-8b-calibrated.json")
    p.add_argument("--seqs", type=int, default=64, help="max_num_seqs")
    p.add_argument("--blocks", type=int, default=2048, help="KV blocks of 16 tokens (4 GiB of Llama-3-8B)")
    p.add_argument("--budget", type=int, default=8192, help="max_num_batched_tokens")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--sync", action="store_true", help="vLLM's synchronous scheduling (default: asynchronous, "
                   "vllm serve's default)")
    p.add_argument("--priority-options", action="append", default=None,
                   help="the priority optimizer's options as JSON, one plugin row each (default: {})")
    p.add_argument("--host-time", type=float, default=0.0, metavar="SCALE",
                   help="the schedulers' host time on the simulated clock: this machine's times SCALE "
                   "(default 0: left out)")
    p.add_argument("--jitter", type=float, default=0.0, metavar="F",
                   help="each step's GPU time times a factor drawn from [1-F, 1+F] (default 0: none)")
    p.add_argument("--seeds", type=int, default=1, help="with --jitter: runs per scheduler, seeded 1..N")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    workload = _core.workload_requests(args.workload, args.set)
    cost = _core.CostModel(args.profile)
    clock = FakeClock()
    plugin.OptimizersMixin.clock_ns = staticmethod(clock)
    plugin.OptimizersMixin.guard_clock_ns = staticmethod(clock)
    if not 0 <= args.jitter < 1 or args.seeds < 1 or (args.seeds > 1 and args.jitter == 0):
        p.error("--jitter must be in [0, 1) and --seeds at least 1 (more than 1 only with --jitter)")
    seeds = range(1, args.seeds + 1) if args.jitter > 0 else [0]
    schedulers = [("vLLM FCFS", {"cls": VllmScheduler if args.sync else AsyncScheduler}),
                  ("vLLM priority", {"cls": VllmScheduler if args.sync else AsyncScheduler, "policy": "priority"})]
    for options in args.priority_options or ["{}"]:
        schedulers.append((f"vLLM + Optimate priority {options}",
                           {"optimate": {"optimizers": {"priority": json.loads(options)}}}))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        model_dir = write_tiny_model(Path(d))
        for label, kw in schedulers:
            rows.append([run(model_dir, workload, cost, clock, args, label, seed=seed, **kw) for seed in seeds])
    classes = sorted(rows[0][0]["ttft_p99_ms"])
    print(f"{len(workload)} requests of {args.workload} on {cost.device} (simulated), {args.seqs} sequences, "
          f"{args.blocks} blocks, budget {args.budget}" +
          (f"; step times jittered by +-{args.jitter:g}, mean of {len(seeds)} runs (range)" if args.jitter else ""))
    host = args.host_time > 0

    def spread(values: list, fmt: str, unit: str = "") -> str:
        """The mean, and the range when there are several runs."""
        text = format(statistics.fmean(values), fmt) + unit
        return text + (f" ({min(values):{fmt}}{unit} to {max(values):{fmt}}{unit})" if len(values) > 1 else "")

    print("| scheduler | out tok/s | vs FCFS | " + " | ".join(f"{c} P99 TTFT (ms)" for c in classes) +
          " | mean TPOT (ms) | mean step (ms) | preemptions | tokens recomputed |" + (" host s |" if host else ""))
    print("|---|---:|---:|" + "---:|" * len(classes) + "---:|---:|---:|---:|" + ("---:|" if host else ""))
    for runs in rows:
        # Each run against FCFS's run of the same seed.
        vs = "" if runs is rows[0] else spread(
            [100 * (r["throughput"] / f["throughput"] - 1) for r, f in zip(runs, rows[0])], "+.1f", "%")
        print(f"| {runs[0]['scheduler']} | {spread([r['throughput'] for r in runs], ',.0f')} | {vs} | " +
              " | ".join(spread([r["ttft_p99_ms"][c] for r in runs], ",.0f") for c in classes) +
              f" | {spread([r['tpot_mean_ms'] for r in runs], '.2f')} | {spread([r['step_mean_ms'] for r in runs], '.2f')}"
              f" | {statistics.fmean(r['preemptions'] for r in runs):,.0f}"
              f" | {statistics.fmean(r['recomputed_tokens'] for r in runs):,.0f} |" +
              (f" {statistics.fmean(r['host_s'] for r in runs):.2f} |" if host else ""))
    if args.json:
        Path(args.json).write_text(json.dumps([r for runs in rows for r in runs], indent=1))


if __name__ == "__main__":
    main()
