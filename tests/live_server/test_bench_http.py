"""`optimate bench --url` against a live `optimate serve`: the benchmark client's figures must
match what the server itself counted, and a server that refuses every request must give a
report of failed records, not a crash."""

import json
import subprocess

from conftest import API_KEY, BIN

NUM_REQUESTS = 4
PROMPT_TOKENS = 12
OUTPUT_TOKENS = 6


def write_workload(path):
    path.write_text(f"""
[workload]
name = "bench-http-test"
seed = 5
num_requests = {NUM_REQUESTS}

[workload.arrival]
kind = "closed"
concurrency = 2

[workload.prompt]
kind = "fixed"
value = {PROMPT_TOKENS}

[workload.output]
kind = "fixed"
value = {OUTPUT_TOKENS}
""")
    return path


def run_bench(tmp_path, *args):
    out = tmp_path / "report"
    proc = subprocess.run([str(BIN), "bench", "--workload", str(write_workload(tmp_path / "w.toml")),
                           "--out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "report.json").read_text()), proc.stdout


def test_bench_url_counts_what_the_server_counts(server, tmp_path):
    tokens_before = server.metric("vllm:generation_tokens_total")
    # The same server twice, as two rows: several --url in one command, the model found by
    # GET /v1/models (no --served-model-name).
    out, report, stdout = run_bench(tmp_path, "--url", f"{server.url},{server.url}/v1", "--label", "first,second")
    assert [run["label"] for run in report["runs"]] == ["first", "second"]
    for run in report["runs"]:
        summary = run["summary"]
        assert (summary["completed"], summary["failed"]) == (NUM_REQUESTS, 0)
        assert summary["total_output_tokens"] == NUM_REQUESTS * OUTPUT_TOKENS  # ignore_eos: exactly max_tokens
        assert summary["total_input_tokens"] == NUM_REQUESTS * PROMPT_TOKENS
        for record in run["records"]:
            assert record["success"], record["error"]
            times = record["token_times_s"]
            assert record["arrival_s"] <= record["first_token_s"] == times[0] <= times[-1] <= record["finish_s"]
        assert summary["ttft_ms"]["mean"] > 0 and summary["output_throughput"] > 0
    # The server's resources, read from its /metrics: a CPU server, so CPU time and peak RSS.
    for run in report["runs"]:
        host, gpu = run["summary"]["host"], run["summary"]["gpu"]
        assert host["unavailable"] == "" and 0 < host["cpu_util_pct"] <= 100, host
        assert host["peak_rss_gib"] > 0.05, host
        assert gpu["unavailable"] == "the server runs on the cpu", gpu
    assert "| CPU util % | Peak RSS (GiB) |" in stdout
    generated = server.metric("vllm:generation_tokens_total") - tokens_before
    assert generated == 2 * NUM_REQUESTS * OUTPUT_TOKENS
    assert "| first |" in stdout and "| second |" in stdout
    for name in ("report.md", "ttft_cdf.svg", "e2e_cdf.svg", "itl_cdf.svg", "throughput.svg"):
        assert (out / name).stat().st_size > 0, name


def test_bench_url_records_refused_requests(guarded_server, tmp_path):
    _, report, _ = run_bench(tmp_path, "--url", guarded_server.url, "--api-key", API_KEY)
    summary = report["runs"][0]["summary"]
    assert (summary["completed"], summary["failed"]) == (0, NUM_REQUESTS)
    for record in report["runs"][0]["records"]:
        assert record["error"].startswith("HTTP 503"), record["error"]
