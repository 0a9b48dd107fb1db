"""SIGTERM drains: requests in progress finish, new connections are refused, the exit code is 0."""

import signal
import threading
import time

import httpx

from conftest import MODEL_NAME, Server


def test_sigterm_drains_running_requests(tmp_path):
    s = Server(tmp_path, "--shutdown-timeout", "60")
    result = {}

    def long_request():
        body = {"model": MODEL_NAME, "prompt": "Count slowly:", "max_tokens": 40, "ignore_eos": True}
        result["response"] = httpx.post(s.url + "/v1/completions", json=body, timeout=120.0)

    try:
        t = threading.Thread(target=long_request)
        t.start()
        deadline = time.monotonic() + 30
        while s.metric("vllm:num_requests_running") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        t.join(timeout=120)
        r = result["response"]
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert r.json()["usage"]["completion_tokens"] == 40
        assert s.proc.wait(timeout=60) == 0, s.log_tail()
    finally:
        s.stop()


def test_shutdown_timeout_aborts_what_is_left(tmp_path):
    s = Server(tmp_path, "--shutdown-timeout", "1")
    try:
        with httpx.Client(timeout=60.0) as c:
            body = {"model": MODEL_NAME, "prompt": "Go on forever:", "max_tokens": 5000, "ignore_eos": True,
                    "stream": True}
            with c.stream("POST", s.url + "/v1/completions", json=body) as r:
                lines = r.iter_lines()
                next(line for line in lines if line.startswith("data: "))
                start = time.monotonic()
                s.proc.send_signal(signal.SIGTERM)
                assert s.proc.wait(timeout=30) == 0, s.log_tail()
                assert time.monotonic() - start < 15
    finally:
        s.stop()
