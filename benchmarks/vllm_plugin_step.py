"""The host time one vLLM step spends scheduling: vLLM's scheduler as it ships (FCFS and
``--scheduling-policy priority``) against ``optimate.vllm.Scheduler`` with the priority
optimizer, driven on the CPU as tests/vllm_plugin drives it (a mock KV cache, a fake model
runner that samples one token per finished prompt or decode). A burst of requests in two
classes arrives at once, so the waiting queue is long while the batch fills.

    tests/vllm_plugin/run.sh is the environment; from the repository root:
    PYTHONPATH=build/python:tests/vllm_plugin .venv-vllm/bin/python benchmarks/vllm_plugin_step.py

Prints, per scheduler: steps, the median and P99 of schedule() + update_from_output() per step
(ms of this machine's time), their sum, and preemptions. Options: --requests, --seqs, --blocks,
--prompt, --output, --priority-options (JSON).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from conftest import Driver, FakeClock, VllmScheduler, build_scheduler, request, write_tiny_model
from optimate.vllm import scheduler as plugin


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
    args = p.parse_args()
    options = json.loads(args.priority_options)
    clock = FakeClock()
    plugin.OptimizersMixin.clock_ns = staticmethod(clock)
    with tempfile.TemporaryDirectory() as d:
        model_dir = write_tiny_model(Path(d))
        rows = [run(model_dir, clock, args, "vLLM FCFS", cls=VllmScheduler),
                run(model_dir, clock, args, "vLLM priority", cls=VllmScheduler, policy="priority"),
                run(model_dir, clock, args, "vLLM + Optimate priority", optimate={"optimizers": {"priority": options}})]
    print("| scheduler | steps | median ms/step | P99 ms/step | total s | preemptions |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scheduler']} | {r['steps']} | {r['median_ms']:.3f} | {r['p99_ms']:.3f} | {r['total_s']:.2f} | "
              f"{r['preemptions']} |")


if __name__ == "__main__":
    main()
