"""What a Python policy costs per engine step, against the same decision made in C++.

Every engine here holds its queue back, so a step runs no model: it builds the scheduler's view
of the N waiting requests, asks the policies, and returns. Four engines, stepped in turn (so
machine load hits them alike):
  cpp-hold      C++ batch policy (predictive, never launching)            -> the step's floor
  py-hold       Python BatchPolicy.decide returning False                 -> + one Python call
  py-queue      launch-at-once, Python QueuePolicy.order_waiting -> []    -> + one Python call
  py-queue-sort as py-queue, sorting the view by prompt length (a realistic policy body)
The extra cost of a Python policy is its step time minus cpp-hold's.

  PYTHONPATH=build/python .venv/bin/python python/benchmarks/policy_overhead.py --model M
"""

import argparse
import statistics
import time

from optimate import BatchPolicy, EngineArgs, QueuePolicy, SamplingParams, create_optimized_engine
from optimate.optimizers import PredictiveBatchingOptimizer


class HoldAll(BatchPolicy):
    def decide(self, view):
        return False


class AdmitNone(QueuePolicy):
    def order_waiting(self, view):
        return []


class ShortestPromptFirstNone(QueuePolicy):
    def order_waiting(self, view):
        order = sorted(range(len(view.waiting)), key=lambda i: view.waiting[i].num_prompt_tokens)
        return order[:0]


def make_engines(model, num_waiting):
    args = dict(model=model, device="cpu", kv_cache_memory="64MiB", max_model_len=512, max_num_seqs=512)
    engines = {
        "cpp-hold": [PredictiveBatchingOptimizer(max_wait_ms=1e12, require_gain=False, idle_only=False)],
        "py-hold": [HoldAll()],
        "py-queue": [AdmitNone()],
        "py-queue-sort": [ShortestPromptFirstNone()],
    }
    params = SamplingParams(max_tokens=1)
    out = {}
    for name, optimizers in engines.items():
        engine = create_optimized_engine(EngineArgs(**args), optimizers=optimizers)
        for i in range(num_waiting):
            engine.add_request(str(i), [1, 2, 3, 4 + i % 7], params)
        out[name] = engine
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--waiting", default="1,16,64,256", help="queue lengths to measure")
    parser.add_argument("--steps", type=int, default=2000, help="steps per engine per round")
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    print(f"{'waiting':>8} {'engine':>14} {'us/step':>9} {'extra us':>9}")
    for n in [int(x) for x in a.waiting.split(",")]:
        engines = make_engines(a.model, n)
        samples = {name: [] for name in engines}
        for _ in range(a.rounds):
            for name, engine in engines.items():
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    engine.step()
                samples[name].append((time.perf_counter() - t0) / a.steps * 1e6)
        for engine in engines.values():
            assert engine.get_stats()["num_running"] == 0, "a held engine ran a request"
        floor = statistics.median(samples["cpp-hold"])
        for name, s in samples.items():
            us = statistics.median(s)
            print(f"{n:>8} {name:>14} {us:>9.1f} {us - floor:>9.1f}")


if __name__ == "__main__":
    main()
