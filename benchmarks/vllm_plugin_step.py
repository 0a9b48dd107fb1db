"""The host time one vLLM step spends scheduling: vLLM's scheduler as it ships (FCFS and
``--scheduling-policy priority``) against ``optimate.vllm.Scheduler`` with the priority
optimizer, driven on the CPU as tests/vllm_plugin drives it (a mock KV cache, a fake model
runner that samples one token per finished prompt or decode). A burst of requests in two
classes arrives at once, so the waiting queue is long while the batch fills.

    tests/vllm_plugin/run.sh is the environment; from the repository root:
    PYTHONPATH=build/python:tests/vllm_plugin .venv-vllm/bin/python benchmarks/vllm_plugin_step.py

Prints, per scheduler: steps, the median and P99 of schedule() + update_from_output() per step
(ms of this machine's time), their sum, and preemptions. Options: --requests, --seqs, --blocks,
--prompt, --output, --priority-options (JSON); --parts also times the plugin's own parts of a
step (its preparation before vLLM's loop, the views it and the victim choice build, putting the
queue back, the step statistics), as the mean per step of the plugin's run.
"""

import argparse
import collections
import functools
import json
import statistics
import tempfile
import time
from pathlib import Path

from conftest import Driver, FakeClock, VllmScheduler, build_scheduler, request, write_tiny_model
from optimate.vllm import scheduler as plugin
from optimate.vllm import stats, views

#: The plugin's parts that --parts times: (owner, method, label).
PARTS = [(plugin.OptimizersMixin, "_optimate_prepare", "preparation"),
         (views.ViewBuilder, "scheduler_view", "the views (the preparation's, and the victim choice's in vLLM's loop)"),
         (plugin.OptimizersMixin, "_optimate_finish", "the queue put back"),
         (stats.StepStats, "on_schedule", "statistics after schedule()"),
         (stats.StepStats, "on_update", "statistics after update_from_output()")]


def time_parts(spent: collections.Counter) -> None:
    """Wraps each of PARTS to add its time (s) to `spent`."""
    for owner, name, label in PARTS:
        method = getattr(owner, name)

        def timed(*a, _method=method, _label=label, **kw):
            t0 = time.perf_counter()
            try:
                return _method(*a, **kw)
            finally:
                spent[_label] += time.perf_counter() - t0

        setattr(owner, name, functools.wraps(method)(timed))


def run(model_dir: str, clock: FakeClock, args, label: str, **kw) -> dict:
    s = build_scheduler(model_dir, num_blocks=args.blocks, max_num_seqs=args.seqs,
                        max_num_batched_tokens=args.budget, **kw)
    d = Driver(s, clock)
    for i in range(args.requests):
        # 20% important (vLLM's 0), the rest 1; lower-first, as vLLM's clients send them.
        d.add(request(f"r{i}", prompt_len=args.prompt, max_tokens=args.output, priority=0 if i % 5 == 0 else 1))
    times = []
    while s.has_requests():
        t0 = time.perf_counter()
        d.step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"scheduler": label, "steps": len(times), "median_ms": statistics.median(times),
            "p99_ms": times[int(0.99 * (len(times) - 1))], "total_s": sum(times) * 1e-3,
            "preemptions": len(d.preempted)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--seqs", type=int, default=64)
    p.add_argument("--blocks", type=int, default=2048)
    p.add_argument("--budget", type=int, default=8192)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--output", type=int, default=160)
    p.add_argument("--priority-options", default="{}")
    p.add_argument("--parts", action="store_true", help="also time the plugin's own parts of a step")
    args = p.parse_args()
    options = json.loads(args.priority_options)
    clock = FakeClock()
    plugin.OptimizersMixin.clock_ns = staticmethod(clock)
    spent = collections.Counter()
    with tempfile.TemporaryDirectory() as d:
        model_dir = write_tiny_model(Path(d))
        rows = [run(model_dir, clock, args, "vLLM FCFS", cls=VllmScheduler),
                run(model_dir, clock, args, "vLLM priority", cls=VllmScheduler, policy="priority")]
        if args.parts:
            time_parts(spent)
        rows.append(run(model_dir, clock, args, "vLLM + Optimate priority",
                        optimate={"optimizers": {"priority": options}}))
    print("| scheduler | steps | median ms/step | P99 ms/step | total s | preemptions |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scheduler']} | {r['steps']} | {r['median_ms']:.3f} | {r['p99_ms']:.3f} | {r['total_s']:.2f} | "
              f"{r['preemptions']} |")
    if args.parts:
        print("\n| the plugin's part | mean ms/step |\n|---|---:|")
        for _, _, label in PARTS:
            print(f"| {label} | {spent[label] * 1e3 / rows[-1]['steps']:.3f} |")


if __name__ == "__main__":
    main()
