"""Inputs a client can send that must never bring the server down or leak engine resources.

Every case ends with the same check: the server still answers, and /metrics shows no running
or waiting request and no KV block in use.
"""

import asyncio
import json
import random
import socket
import time

import httpx
import pytest

from conftest import MODEL_NAME


def post_raw(server, path: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(server.url + path, content=body, headers={"Content-Type": content_type}, timeout=30.0)


def assert_openai_error(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"] and error["code"] == status


@pytest.fixture(autouse=True)
def server_survives(server):
    yield
    r = httpx.post(server.url + "/v1/completions",
                   json={"model": MODEL_NAME, "prompt": "ok", "max_tokens": 1}, timeout=60.0)
    assert r.status_code == 200, r.text
    server.wait_idle()


@pytest.mark.parametrize("body", [b"{", b"not json", b"[1, 2, 3]", b"null", b"", b'{"prompt": "a",}',
                                  b'{"model": "smollm2", "prompt": "a"} trailing'])
def test_malformed_json(server, body):
    assert_openai_error(post_raw(server, "/v1/completions", body), 400)


BAD_FIELDS = [
    {"max_tokens": -5},
    {"max_tokens": 0},
    {"max_tokens": 2**64},
    {"max_tokens": 10**400},
    {"max_tokens": 1e308},
    {"max_tokens": "ten"},
    {"temperature": -1},
    {"temperature": "hot"},
    {"top_p": 0},
    {"top_p": 7},
    {"n": 0},
    {"n": 10**12},
    {"n": -3},
    {"logprobs": 10**9},
    {"logprobs": -1},
    {"prompt": 123},
    {"prompt": [10**9]},
    {"prompt": [-1]},
    {"prompt": {"text": "a"}},
    {"prompt": ""},
    {"stop": 5},
    {"stop": [1, 2]},
    {"priority": "high"},
    {"priority": 2**70},
    {"stream": "sometimes"},
    {"seed": "abc"},
    {"min_tokens": 100, "max_tokens": 10},
    {"stream_options": {"include_usage": True}},
]


@pytest.mark.parametrize("fields", BAD_FIELDS, ids=[json.dumps(f)[:40] for f in BAD_FIELDS])
def test_bad_completion_fields(server, fields):
    body = {"model": MODEL_NAME, "prompt": "hello", "max_tokens": 4, **fields}
    assert_openai_error(httpx.post(server.url + "/v1/completions", json=body, timeout=30.0), 400)


# Written by hand: Python's json module will not produce these. Expected status per field;
# a temperature past 2 is a 400 (vLLM's SamplingParams: "temperature must be in [0, 2]"), and
# seed -0 is seed 0.
NUMBERS = [
    ("max_tokens", "1e400", 400), ("max_tokens", "-1e400", 400), ("max_tokens", "-0", 400),
    ("max_tokens", "123456789012345678901234567890", 400), ("max_tokens", "NaN", 400),
    ("n", "1e400", 400), ("n", "123456789012345678901234567890", 400), ("n", "-0", 400),
    ("temperature", "1e400", 400), ("temperature", "-1e400", 400), ("temperature", "NaN", 400),
    ("temperature", "1e-400", 200), ("temperature", "123456789012345678901234567890", 400),
    ("seed", "123456789012345678901234567890", 400), ("seed", "-1e400", 400), ("seed", "-0", 200),
    ("top_p", "1e-400", 400), ("priority", "1e400", 400),
]


@pytest.mark.parametrize("field,number,status", NUMBERS)
def test_numbers_out_of_range(server, field, number, status):
    body = f'{{"model": "smollm2", "prompt": "hello", "max_tokens": 2, "{field}": {number}}}'.encode()
    r = post_raw(server, "/v1/completions", body)
    if status == 200:
        assert r.status_code == 200, r.text
    else:
        assert_openai_error(r, status)


@pytest.mark.parametrize("messages", ["hi", [], [{"role": 1, "content": "x"}], [{"content": "x"}],
                                      [{"role": "user", "content": 5}], [None], [[]]])
def test_bad_chat_messages(server, messages):
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 4}
    assert_openai_error(httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30.0), 400)


def test_ten_megabyte_body(server):
    body = json.dumps({"model": MODEL_NAME, "prompt": "a" * (10 * 1024 * 1024)}).encode()
    # Its length alone is refused, before a byte of it is read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        reply = b""
        while b"}}" not in reply:
            chunk = s.recv(4096)
            assert chunk, reply
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(payload)["error"]["code"] == 413
    # Sent whole, it gets the same answer, or the connection closes while the client still sends.
    try:
        r = post_raw(server, "/v1/completions", body)
    except (httpx.WriteError, httpx.RemoteProtocolError):
        return
    assert_openai_error(r, 413)


def test_invalid_utf8(server):
    body = b'{"model": "smollm2", "prompt": "caf\xc3\x28 \xff\xfe", "max_tokens": 2}'
    assert_openai_error(post_raw(server, "/v1/completions", body), 400)
    body = b'{"model": "smollm2", "messages": [{"role": "user", "content": "\xed\xa0\x80"}], "max_tokens": 2}'
    assert_openai_error(post_raw(server, "/v1/chat/completions", body), 400)


def test_request_that_never_finishes_sending(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"prompt\": \"")
        start = time.monotonic()
        reply = s.recv(4096)
        # The server gives up after --http-read-timeout (3 s here) rather than wait forever.
        assert time.monotonic() - start < 15
        assert reply.startswith(b"HTTP/1.1 408"), reply[:100]


def test_headers_that_never_end(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        reply = s.recv(4096)
        assert reply == b"" or reply.startswith(b"HTTP/1.1 408"), reply[:100]


def test_disconnect_mid_stream(server):
    aborted = server.metric("vllm:request_success_total", finished_reason="abort")
    generated = server.metric("vllm:generation_tokens_total")
    body = {"model": MODEL_NAME, "prompt": "Tell me a long story.", "max_tokens": 500, "stream": True,
            "ignore_eos": True}
    with httpx.Client(timeout=60.0) as c:
        with c.stream("POST", server.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            events = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events += 1
                if events == 3:
                    break
    # The request is aborted and its blocks freed well before it could have produced 500 tokens.
    server.wait_idle(timeout_s=10)
    assert server.metric("vllm:request_success_total", finished_reason="abort") == aborted + 1
    assert server.metric("vllm:generation_tokens_total") - generated < 500


def test_two_hundred_requests_aborted_at_once(server):
    body = {"model": MODEL_NAME, "prompt": "Write an essay about the sea.", "max_tokens": 400, "stream": True,
            "ignore_eos": True}

    async def one(client: httpx.AsyncClient, started: asyncio.Event, counter: list) -> None:
        async with client.stream("POST", server.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    counter[0] += 1
                    if counter[0] >= 20:
                        started.set()
                    await asyncio.sleep(3600)  # hold the stream open until cancelled

    async def run() -> None:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
            started, counter = asyncio.Event(), [0]
            tasks = [asyncio.create_task(one(client, started, counter)) for _ in range(200)]
            await asyncio.wait_for(started.wait(), timeout=120)
            running = server.metric("vllm:num_requests_running") + server.metric("vllm:num_requests_waiting")
            assert running > 0
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())
    server.wait_idle(timeout_s=60)


def priority_labels(server) -> dict[str, set]:
    """Every priority label value of each per-priority family."""
    out = {}
    for (name, labels), _ in server.metrics().items():
        for key, value in labels:
            if key == "priority":
                out.setdefault(name, set()).add(value)
    return out


def send_random_priorities(server, count: int) -> None:
    async def run() -> None:
        # Fresh connections: a kept-alive one idle for --http-read-timeout (3 s here) may be
        # closed just as the next request is sent.
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
            rng = random.Random(1234)
            bodies = [{"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1,
                       "priority": rng.randrange(-2**62, 2**62)} for _ in range(count)]
            replies = await asyncio.gather(*(client.post(server.url + "/v1/completions", json=b) for b in bodies))
            assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200][:3]

    asyncio.run(run())


def test_client_priorities_cannot_grow_metrics(server):
    # The reproducer sent requests with random priorities: each value became ~24 new series, so
    # these 60 would have added some 150 KB.
    send_random_priorities(server, 5)
    before = len(httpx.get(server.url + "/metrics", timeout=30.0).content)
    send_random_priorities(server, 60)
    after = len(httpx.get(server.url + "/metrics", timeout=30.0).content)
    assert after - before < 4096, f"/metrics grew from {before} to {after} bytes"
    for family, values in priority_labels(server).items():
        assert values <= {"-2", "-1", "0", "1", "2", "other", "low", "medium", "high", "critical"}, (family, values)


def test_priority_labels_are_the_optimizers_levels(server):
    url = server.url + "/v1/optimizers/priority"
    r = httpx.put(url, json={"enabled": True, "options": {"levels": 3}}, timeout=30.0)
    assert r.status_code == 200, r.text
    try:
        send_random_priorities(server, 24)
        queue_time = priority_labels(server)["optimate:request_queue_time_by_priority_seconds_count"]
        assert {"low", "high"} <= queue_time  # random values clamp to the lowest and highest levels
        assert not queue_time - {"-2", "-1", "0", "1", "2", "other", "low", "medium", "high"}
    finally:
        assert httpx.put(url, json={"enabled": False}, timeout=30.0).status_code == 200


def test_head_then_get_on_a_kept_alive_connection(server):
    with httpx.Client(timeout=30.0) as c:
        for path in ("/health", "/metrics", "/v1/models", "/v1/completions", "/no/such/path"):
            c.head(server.url + path)
            assert c.get(server.url + "/health").status_code == 200, path
