#!/usr/bin/env python3
"""Each priority class's tail latency from an `optimate bench` report, one row per run.

Usage: scripts/class-latency.py REPORT_JSON
The bench's own table gives the high class's P99 TTFT only; a comparison that must keep the
important class no slower (TTFT and end to end) reads both here.
"""
import json
import sys


def main(path: str) -> None:
    report = json.load(open(path))
    runs = report["runs"]
    names = [c["name"] for c in runs[0]["summary"].get("classes", [])]
    head = ["run", "out tok/s", "mean TPOT (ms)"]
    for n in names:
        head += [f"{n} P99 TTFT (ms)", f"{n} P99 E2E (ms)", f"{n} mean E2E (ms)"]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for run in runs:
        s = run["summary"]
        row = [run.get("label", "?"), f"{s['output_throughput']:.0f}", f"{s['tpot_ms']['mean']:.2f}"]
        by_name = {c["name"]: c for c in s.get("classes", [])}
        for n in names:
            c = by_name.get(n)
            row += ["-"] * 3 if c is None else [f"{c['ttft_ms']['p99']:.0f}", f"{c['e2el_ms']['p99']:.0f}",
                                               f"{c['e2el_ms']['mean']:.0f}"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: class-latency.py REPORT_JSON")
    main(sys.argv[1])
