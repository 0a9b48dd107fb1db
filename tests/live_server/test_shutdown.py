"""SIGTERM drains: requests in progress finish, new connections are refused, the exit code is 0."""

import json
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


def read_stream(response) -> tuple[list[dict], bool]:
    """The JSON events of an SSE response, and whether [DONE] ended it."""
    events, done = [], False
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
        else:
            assert not done, "an event after [DONE]"
            events.append(json.loads(line[len("data: "):]))
    return events, done


def test_shutdown_deadline_ends_open_streams_properly(tmp_path):
    s = Server(tmp_path, "--shutdown-timeout", "1")
    results = {}

    def stream(name: str, path: str, body: dict) -> None:
        try:
            with httpx.Client(timeout=60.0) as c, c.stream("POST", s.url + path, json=body) as r:
                results[name] = read_stream(r)
        except Exception as e:  # a cut stream raises here (incomplete chunked read)
            results[name] = e

    def whole() -> None:
        body = {"model": MODEL_NAME, "prompt": "Go on forever:", "max_tokens": 5000, "ignore_eos": True}
        results["whole"] = httpx.post(s.url + "/v1/completions", json=body, timeout=60.0)

    long = {"model": MODEL_NAME, "max_tokens": 5000, "ignore_eos": True, "stream": True}
    threads = [
        threading.Thread(target=stream, args=("completion", "/v1/completions",
                                              {**long, "prompt": "Go on forever:",
                                               "stream_options": {"include_usage": True}})),
        threading.Thread(target=stream, args=("chat", "/v1/chat/completions",
                                              {**long, "messages": [{"role": "user", "content": "Talk."}]})),
        threading.Thread(target=whole),
    ]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while s.metric("vllm:num_requests_running") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.metric("vllm:num_requests_running") == 3
        start = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=60)
        assert s.proc.wait(timeout=30) == 0, s.log_tail()
        assert time.monotonic() - start < 15
        for name in ("completion", "chat"):
            assert not isinstance(results[name], Exception), f"{name}: {results[name]!r}"
            events, done = results[name]
            assert done, f"{name}: no [DONE]"
            finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
            assert finishes == ["abort"], f"{name}: {finishes}"
        assert results["completion"][0][-1]["usage"]["completion_tokens"] > 0  # usage still comes last
        whole = results["whole"]
        assert whole.status_code == 200 and whole.json()["choices"][0]["finish_reason"] == "abort"
        assert "aborting 3 unfinished requests; 2 open streams end with finish_reason" in s.log_tail()
    finally:
        s.stop()
