"""The bench module's workload generator and step-time model, as Python benchmarks use them
(benchmarks/vllm_plugin_sim.py), against what `optimate bench --backend sim` itself reports."""

import json
import subprocess

import pytest

from conftest import BIN, ROOT
from optimate import EngineError, _core

WORKLOAD = str(ROOT / "configs/workloads/vllm-two-class-burst.toml")
PROFILE = str(ROOT / "profiles/h200-llama3-8b-calibrated.json")


@pytest.fixture(scope="module")
def bench_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    subprocess.run([str(BIN), "bench", "--workload", WORKLOAD, "--set", "workload.num_requests=30",
                    "--compare", str(ROOT / "configs/kv-preempt/fcfs.toml"), "--backend", "sim",
                    "--profile", PROFILE, "--out", str(out)], check=True, capture_output=True, cwd=ROOT)
    return json.loads((out / "report.json").read_text())["runs"][0]["records"]


def test_the_requests_are_the_ones_the_bench_sends(bench_records):
    requests = _core.workload_requests(WORKLOAD, ["workload.num_requests=30"])
    assert len(requests) == 30
    by_id = {r["id"]: r for r in bench_records}
    for r in requests:
        sent = by_id[r["id"]]
        assert r["arrival_s"] == pytest.approx(sent["arrival_s"], abs=1e-9)
        assert (r["prompt_len"], r["max_tokens"]) == (sent["prompt_tokens"], sent["output_tokens"])
        assert (r["priority"], r["priority_class"]) == (sent["priority"], sent["priority_class"])
    assert [r["arrival_s"] for r in requests] == sorted(r["arrival_s"] for r in requests)


def test_a_step_costs_what_the_simulated_engine_spent_on_it(bench_records):
    """The first request finds the engine idle: its first token comes one prefill step after it
    arrives, and its second one decode step later."""
    cost = _core.CostModel(PROFILE)
    first = min(bench_records, key=lambda r: r["arrival_s"])
    times = first["token_times_s"]
    assert times[0] - first["arrival_s"] == pytest.approx(cost.step_seconds([(first["prompt_tokens"], 0)]), rel=1e-6)
    assert times[1] - times[0] == pytest.approx(cost.step_seconds([(1, first["prompt_tokens"])]), rel=1e-6)


def test_bad_inputs_are_named():
    with pytest.raises(EngineError, match="nope.json"):
        _core.CostModel("nope.json")
    with pytest.raises(ValueError, match="new tokens must be >= 1"):
        _core.CostModel(PROFILE).step_seconds([(0, 10)])
    with pytest.raises(Exception, match="num_requestz"):
        _core.workload_requests(WORKLOAD, ["workload.num_requestz=3"])
