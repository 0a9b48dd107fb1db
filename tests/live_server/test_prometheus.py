"""A real Prometheus server scrapes /metrics and answers queries on the vLLM series."""

import shutil
import subprocess
import time

import httpx

from conftest import MODEL_NAME, free_port


def test_prometheus_scrapes_vllm_series(server, tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "the `prometheus` binary is missing (Debian package `prometheus`; scripts/setup.sh installs it)"
    # Some traffic first, so counters and histograms have values.
    httpx.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2},
               timeout=60.0).raise_for_status()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: optimate
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:{server.port}"]
""")
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.monotonic() + 90
        results = []
        while time.monotonic() < deadline and not results:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                # Until its storage is open Prometheus answers 503 "Service Unavailable" in plain text.
                reply = httpx.get(api + "/query", params={"query": "vllm:num_requests_running"}, timeout=5)
                if reply.status_code == 200:
                    body = reply.json()
                    results = body["data"]["result"] if body.get("status") == "success" else []
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        assert results, "Prometheus never returned vllm:num_requests_running"
        assert results[0]["metric"]["model_name"] == MODEL_NAME
        assert results[0]["metric"]["job"] == "optimate"
        assert float(results[0]["value"][1]) == 0.0
        # The scrape itself succeeded: `up` is 1 for the target.
        up = httpx.get(api + "/query", params={"query": 'up{job="optimate"}'}, timeout=5).json()
        assert up["data"]["result"][0]["value"][1] == "1"
        # Counters arrive with their vLLM names too.
        tokens = httpx.get(api + "/query", params={"query": "vllm:generation_tokens_total"}, timeout=5).json()
        assert float(tokens["data"]["result"][0]["value"][1]) >= 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_every_exported_histogram_moves_under_load(server):
    from prometheus_client.parser import text_string_to_metric_families

    def worker() -> None:
        body = {"model": MODEL_NAME, "prompt": "Tell me a story.", "max_tokens": 6, "ignore_eos": True,
                "stream": True}
        with httpx.Client(timeout=120) as c, c.stream("POST", server.url + "/v1/completions", json=body) as r:
            for _ in r.iter_lines():
                pass

    import threading
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    text = httpx.get(server.url + "/metrics", timeout=30).text
    still = []
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        count = sum(s.value for s in family.samples if s.name.endswith("_count"))
        if count == 0:
            still.append(family.name)
    assert not still, f"histograms never observed: {still}"
