"""`optimate bench` end to end, as a user runs it: --compare and --sweep on the simulated backend
(deterministic), the real CPU model with the resource and cost columns, and the regression gate."""

import json
import subprocess

from conftest import BIN, MODEL, ROOT

PROFILE = ROOT / "profiles" / "h200-llama3-8b-calibrated.json"


def bursty_workload(path, num_requests=240):
    path.write_text(f"""
[workload]
name = "cli-test"
seed = 3
num_requests = {num_requests}
token_id_range = [1000, 4000]

[workload.arrival]
kind = "burst"
on_s = 2.0
on_rate = 120.0
off_s = 4.0
off_rate = 10.0

[workload.prompt]
kind = "uniform"
min = 64
max = 512

[workload.output]
kind = "uniform"
min = 16
max = 128

[[workload.priorities]]
name = "high"
priority = 3
weight = 0.2

[[workload.priorities]]
name = "low"
priority = 1
weight = 0.8
""")
    return path


def bench(tmp_path, *args, check=True):
    out = tmp_path / "report"
    proc = subprocess.run([str(BIN), "bench", "--out", str(out), *args], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return proc, report, out


def test_compare_runs_each_configuration_and_tables_them_against_the_first(tmp_path):
    workload = bursty_workload(tmp_path / "w.toml")
    proc, report, out = bench(tmp_path, "--workload", str(workload), "--compare", "baseline,b-priority",
                              "--backend", "sim", "--profile", str(PROFILE), "--set", "max_num_seqs=16",
                              "--price-per-hour", "3.5")
    runs = report["runs"]
    assert [r["label"] for r in runs] == ["Baseline", "B"]
    for r in runs:
        assert r["summary"]["completed"] == 240 and r["summary"]["failed"] == 0
        assert r["summary"]["usd_per_million_output_tokens"] > 0
    # Priority scheduling does what it is for: the high class's P99 TTFT falls.
    def high_p99(r):
        return next(c for c in r["summary"]["classes"] if c["name"] == "high")["ttft_ms"]["p99"]
    assert high_p99(runs[1]) < 0.5 * high_p99(runs[0]), (high_p99(runs[0]), high_p99(runs[1]))
    md = (out / "report.md").read_text()
    assert "| Scenario | Configuration | Throughput (out tok/s) |" in md
    assert "| Baseline | FCFS, launch at once |" in md and "| B | priority scheduling (3 levels) |" in md
    assert "$/M out tok" in md and "Cost at $3.50/hour" in md
    assert "--compare baseline,b-priority --backend sim --profile" in md  # the command that made it
    assert "### Per priority" in md
    # The simulated backend is deterministic: the same command gives the same figures.
    _, again, _ = bench(tmp_path, "--workload", str(workload), "--compare", "baseline,b-priority",
                        "--backend", "sim", "--profile", str(PROFILE), "--set", "max_num_seqs=16")
    assert [r["summary"]["output_throughput"] for r in again["runs"]] == [r["summary"]["output_throughput"] for r in runs]


def test_sweep_runs_one_configuration_per_value(tmp_path):
    workload = bursty_workload(tmp_path / "w.toml")
    _, report, out = bench(tmp_path, "--workload", str(workload), "--compare", "baseline", "--backend", "sim",
                           "--profile", str(PROFILE), "--sweep", "max_num_seqs=4,64")
    runs = report["runs"]
    assert [r["label"] for r in runs] == ["max_num_seqs=4", "max_num_seqs=64"]
    assert [r["description"] for r in runs] == ["Baseline with max_num_seqs=4", "Baseline with max_num_seqs=64"]
    # Four sequences queue the bursts; 64 do not.
    assert runs[1]["summary"]["ttft_ms"]["p99"] < runs[0]["summary"]["ttft_ms"]["p99"]
    assert max(b for r in runs for b in [r["summary"]["batch_size"]["max"]]) > 4
    assert runs[0]["summary"]["batch_size"]["max"] <= 4
    for name in ("sweep_throughput.svg", "sweep_latency.svg"):
        assert (out / name).stat().st_size > 0
    bad, _, _ = bench(tmp_path, "--workload", str(workload), "--compare", "baseline,b-priority", "--backend", "sim",
                      "--profile", str(PROFILE), "--sweep", "max_num_seqs=4,64", check=False)
    assert bad.returncode == 1 and "--sweep runs one configuration" in bad.stderr


def test_a_cpu_run_reports_cpu_utilization_peak_rss_and_cost(tmp_path):
    workload = tmp_path / "w.toml"
    workload.write_text("""
[workload]
name = "cpu-resources"
seed = 1
num_requests = 4
[workload.arrival]
kind = "offline"
[workload.prompt]
kind = "fixed"
value = 16
[workload.output]
kind = "fixed"
value = 4
""")
    _, report, out = bench(tmp_path, "--workload", str(workload), "--compare", "baseline", "--backend", "cpu",
                           "--model", str(MODEL), "--set", "kv_cache_memory=64MiB", "--set", "max_model_len=512",
                           "--price-per-hour", "1")
    s = report["runs"][0]["summary"]
    assert s["host"]["unavailable"] == ""
    assert 0 < s["host"]["cpu_util_pct"] <= 100
    assert s["host"]["peak_rss_gib"] > 0.05  # the model alone is 98 MB
    assert s["gpu"]["unavailable"] == "cpu backend"
    md = (out / "report.md").read_text()
    assert "| CPU util % | Peak RSS (GiB) | $/M out tok |" in md


def test_the_gate_passes_a_recorded_run_and_fails_a_worse_one(tmp_path):
    workload = bursty_workload(tmp_path / "w.toml", num_requests=120)
    sim = ["--workload", str(workload), "--compare", "baseline", "--backend", "sim", "--profile", str(PROFILE)]
    recorded = tmp_path / "gate.toml"
    bench(tmp_path, *sim, "--record-gate", str(recorded))
    proc, _, _ = bench(tmp_path, *sim, "--gate", str(recorded))
    assert "Gate passed." in proc.stdout
    # A figure 20% above what the engine does: the same run now fails the gate.
    text = recorded.read_text()
    tok_s = float(text.split("output_throughput = ")[1].split("\n")[0])
    recorded.write_text(text.replace(f"output_throughput = {tok_s:.1f}", f"output_throughput = {1.2 * tok_s:.1f}"))
    proc, _, out = bench(tmp_path, *sim, "--gate", str(recorded), check=False)
    assert proc.returncode == 1
    assert "**FAIL**" in proc.stdout and "regression gate" in proc.stderr
    assert "Gate FAILED." in (out / "report.md").read_text()
    # A malformed gate fails before anything runs.
    bad = tmp_path / "bad.toml"
    bad.write_text("[runs.Baseline]\nthroughput = 5\n")
    proc, _, _ = bench(tmp_path, *sim, "--gate", str(bad), check=False)
    assert proc.returncode == 1 and "unknown key 'throughput'" in proc.stderr
