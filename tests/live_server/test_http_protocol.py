"""HTTP as real clients speak it: HEAD on kept-alive connections, Allow, OPTIONS and CORS as vLLM
answers them, streams to HTTP/1.0 clients, and the access log."""

import json
import socket
import time

import httpx

from conftest import MODEL_NAME, Server


def test_head_then_get_on_one_connection(server):
    # The reproducer: a HEAD answered with a body made the next response unreadable.
    with httpx.Client(timeout=30.0) as c:
        head = c.head(server.url + "/health")
        assert head.status_code == 200
        assert c.get(server.url + "/health").status_code == 200
        models = c.get(server.url + "/v1/models")
        head = c.head(server.url + "/v1/models")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(models.content)
        assert c.get(server.url + "/v1/models").json() == models.json()


def test_method_not_allowed_says_what_is(server):
    r = httpx.get(server.url + "/v1/completions", timeout=30.0)
    assert r.status_code == 405
    assert r.headers["allow"] == "OPTIONS, POST"
    assert r.json()["error"]["code"] == 405
    r = httpx.delete(server.url + "/metrics", timeout=30.0)
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, HEAD, OPTIONS"


def test_options_lists_the_methods(server):
    r = httpx.options(server.url + "/v1/chat/completions", timeout=30.0)
    assert r.status_code == 200
    assert r.headers["allow"] == "OPTIONS, POST"
    assert httpx.options(server.url + "/no/such/path", timeout=30.0).status_code == 404


def test_cors_preflight_and_response_headers_by_default(guarded_server):
    # vLLM's defaults: any origin, any method and header, no credentials; the preflight needs no key.
    r = httpx.options(guarded_server.url + "/v1/chat/completions", timeout=30.0, headers={
        "Origin": "https://ui.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == "authorization,content-type"
    assert "access-control-allow-credentials" not in r.headers
    r = httpx.get(guarded_server.url + "/health", headers={"Origin": "https://ui.example"}, timeout=30.0)
    assert r.headers["access-control-allow-origin"] == "*"


def test_cors_flags_as_vllm_names_them(tmp_path):
    s = Server(tmp_path, "--allowed-origins", '["https://ok.example"]', "--allowed-methods", "GET,POST",
               "--allowed-headers", '["Authorization"]', "--allow-credentials")
    try:
        bad = httpx.options(s.url + "/v1/models", timeout=30.0, headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
        assert bad.status_code == 400 and bad.text == "Disallowed CORS origin"
        good = httpx.options(s.url + "/v1/models", timeout=30.0, headers={
            "Origin": "https://ok.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Authorization"})
        assert good.status_code == 200
        assert good.headers["access-control-allow-origin"] == "https://ok.example"
        assert good.headers["access-control-allow-credentials"] == "true"
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "https://ok.example"}, timeout=30.0)
        assert r.headers["access-control-allow-origin"] == "https://ok.example"
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "https://evil.example"}, timeout=30.0)
        assert "access-control-allow-origin" not in r.headers
    finally:
        assert s.stop() == 0, s.log_tail()


def read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_http10_stream_is_close_delimited(server):
    body = json.dumps({"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2, "stream": True,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        reply = read_all(s)  # the server closes: that is where the body ends
    head, _, events = reply.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    lines = [line for line in events.decode().split("\n") if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(len(c["choices"][0]["text"]) > 0 for c in chunks) >= 1


def test_access_log_names_each_request(server):
    httpx.get(server.url + "/v1/models?probe=access-log", timeout=30.0)
    httpx.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1},
               timeout=60.0)
    wanted = ['"GET /v1/models?probe=access-log HTTP/1.1" 200 ', '"POST /v1/completions HTTP/1.1" 200 ']
    # A line is written once the response has left, which may be just after the client has it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = server.access_log()
        if all(any(w in line for line in lines) for w in wanted):
            return
        time.sleep(0.05)
    raise AssertionError(f"missing access-log lines; last ones: {lines[-5:]}")


def test_access_log_is_off_by_default(guarded_server):
    httpx.get(guarded_server.url + "/health", timeout=30.0)
    assert guarded_server.access_log() == []

