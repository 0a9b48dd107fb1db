#!/usr/bin/env python3
"""Writes tests/data/metrics/exposition.txt with the official Prometheus Python client.

tests/metrics/exposition_test.cpp builds the same families, applies the same updates and
expects byte-identical text. Run with a Python that has prometheus_client:
    .venv/bin/python tests/scripts/gen_prometheus_fixture.py
"""
import math
import os
from pathlib import Path

os.environ["PROMETHEUS_DISABLE_CREATED_SERIES"] = "True"
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]

r = CollectorRegistry()
c = Counter("demo:requests", "Requests served.\nSecond line with a \\ backslash.",
            ["model_name", "finished_reason"], registry=r)
c.labels('m"x\\y\nz', "stop").inc(3)
c.labels("m", "length").inc(0.5)

g = Gauge("demo:values", "Assorted gauge values.", ["case"], registry=r)
for case, value in [("zero", 0.0), ("int", 7.0), ("small", 1e-05), ("tenth", 0.1),
                    ("big", 1234567.0), ("neg", -2.5), ("inf", math.inf), ("ninf", -math.inf),
                    ("nan", math.nan), ("third", 1.0 / 3.0), ("mid", 123456.0)]:
    g.labels(case).set(value)

plain = Gauge("demo:plain", "A gauge without labels.", registry=r)
plain.set(42)

h = Histogram("demo:ttft_seconds", "Time to first token.", ["model_name"],
              buckets=TTFT_BUCKETS, registry=r)
for v in [0.0005, 0.001, 0.3, 3000.0, 0.07]:
    h.labels("m").observe(v)

h2 = Histogram("demo:sizes", "Sizes, no labels.", buckets=[1, 2, 5], registry=r)
for v in [1, 1, 3, 9]:
    h2.observe(v)

out = Path(__file__).resolve().parents[1] / "data" / "metrics" / "exposition.txt"
out.write_bytes(generate_latest(r))
print(out)
