"""benchmarks/vllm_plugin_step.py, the host time of a step under each scheduler, on a small
burst: it runs to the end under each and, with --parts, times the plugin's own parts."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_step_benchmark_runs_and_times_the_plugins_parts():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/vllm_plugin_step.py"), "--requests", "40",
                          "--seqs", "8", "--blocks", "256", "--parts"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for scheduler in ("vLLM FCFS", "vLLM priority", "vLLM + Optimate priority"):
        assert int(rows[scheduler].split("|")[2]) > 0, out  # steps
    for part in ("preparation", "the views", "the queue put back"):
        row = next(line for label, line in rows.items() if label.startswith(part))
        assert float(row.split("|")[2]) > 0, out
