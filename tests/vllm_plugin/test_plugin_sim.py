"""benchmarks/vllm_plugin_sim.py, the benchmark that runs vLLM's scheduler on the simulated GPU,
on a small load: every request finishes under each scheduler, scheduled synchronously and
asynchronously, with and without the host's time on the simulated clock or jittered step
times, and the priority optimizer gives the important class the shorter tail."""

import argparse
import importlib.util
from pathlib import Path

import pytest

from conftest import FakeClock, VllmScheduler
from optimate import _core
from optimate.vllm import scheduler as plugin
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vllm_plugin_sim", ROOT / "benchmarks/vllm_plugin_sim.py")
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)


@pytest.mark.parametrize("sync,host_time,jitter", [(True, 0.0, 0.0), (False, 0.0, 0.0), (False, 1.0, 0.0),
                                                   (False, 0.0, 0.05)])
def test_every_request_finishes_and_the_important_class_waits_less(model_dir, monkeypatch, sync, host_time, jitter):
    clock = FakeClock()
    monkeypatch.setattr(plugin.OptimizersMixin, "clock_ns", staticmethod(clock))
    monkeypatch.setattr(plugin.OptimizersMixin, "guard_clock_ns", staticmethod(clock))
    workload = _core.workload_requests(str(ROOT / "configs/workloads/vllm-two-class-burst.toml"),
                                       ["workload.num_requests=120"])
    cost = _core.CostModel(str(ROOT / "profiles/h200-llama3-8b-calibrated.json"))
    args = argparse.Namespace(blocks=512, seqs=16, budget=2048, max_model_len=4096, no_prefix_caching=False,
                              sync=sync, host_time=host_time, jitter=jitter)
    vllm_cls = VllmScheduler if sync else AsyncScheduler
    fcfs = sim.run(model_dir, workload, cost, clock, args, "fcfs", cls=vllm_cls, seed=1)
    ours = sim.run(model_dir, workload, cost, clock, args, "optimate", seed=1, optimate={"optimizers": {"priority": {}}})
    for row in (fcfs, ours):  # run() asserts that every request finished
        assert row["throughput"] > 0 and row["duration_s"] > 0
        # A request's TPOT spans its steps (and any wait after a preemption): at least a step's.
        assert row["tpot_mean_ms"] >= 0.9 * row["step_mean_ms"] > 0
        assert set(row["ttft_p99_ms"]) == {"high", "low"}
    assert ours["ttft_p99_ms"]["high"] < 0.5 * fcfs["ttft_p99_ms"]["high"]
    for row in (fcfs, ours):  # the host's time is on the clock only when asked for
        assert (row["host_s"] > 0) == (host_time > 0)
    if jitter > 0:  # a seed is one path, the same every time; another seed, another path
        again = sim.run(model_dir, workload, cost, clock, args, "fcfs", cls=vllm_cls, seed=1)
        other = sim.run(model_dir, workload, cost, clock, args, "fcfs", cls=vllm_cls, seed=2)
        assert again["duration_s"] == pytest.approx(fcfs["duration_s"], abs=1e-6)  # (each run starts at its own time)
        assert other["duration_s"] != pytest.approx(fcfs["duration_s"], abs=1e-3)
