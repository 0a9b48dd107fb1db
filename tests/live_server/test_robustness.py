"""One request must never bring the server down, tried as an attacker would: a ~140 KB schema of
70,000 nested '[' on every path that takes a schema or a JSON value, a storm of slow grammar
compiles, bodies with hundreds of thousands of keys, integers past int64, schema keywords the
grammar engine would drop. Each gets a clear answer, and the server keeps serving everyone
else meanwhile."""

import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from conftest import API_KEY, MODEL_NAME, Server

DEEP = "[" * 70_000 + "]" * 70_000
CHAT = {"model": MODEL_NAME, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}


def post(server, path: str, body: str, **headers) -> httpx.Response:
    return httpx.post(server.url + path, content=body.encode(), timeout=60.0,
                      headers={"Content-Type": "application/json", **headers})


def with_field(base: dict, field: str, raw_json: str) -> str:
    """`base` as JSON with `field` set to raw JSON text (too deep for Python's own encoder)."""
    return json.dumps({**base, field: "@@"}).replace('"@@"', raw_json)


def test_deep_nesting_on_every_schema_path_is_a_400_naming_the_field(server):
    tool = '{"type": "function", "function": {"name": "f", "parameters": ' + DEEP + "}}"
    cases = [
        ("/v1/chat/completions", with_field(CHAT, "response_format",
                                            '{"type": "json_schema", "json_schema": {"name": "x", "schema": ' + DEEP + "}}"),
         "response_format"),
        ("/v1/completions", with_field({"model": MODEL_NAME, "prompt": "x"}, "guided_json", DEEP), "guided_json"),
        ("/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": "x", "guided_json": DEEP}), "guided_json"),
        ("/v1/chat/completions", with_field(CHAT, "structured_outputs", '{"json": ' + DEEP + "}"), "structured_outputs"),
        ("/v1/chat/completions", with_field(CHAT, "response_format",
                                            '{"type": "structural_tag", "format": {"type": "json_schema", "json_schema": '
                                            + DEEP + "}}"), "response_format"),
        ("/v1/chat/completions", with_field({**CHAT, "tool_choice": "required"}, "tools", "[" + tool + "]"), "tools"),
        ("/v1/chat/completions", with_field({**CHAT, "tool_choice": {"type": "function", "function": {"name": "f"}}},
                                            "tools", "[" + tool + "]"), "tools"),
        # What vllm-router's cache_aware policy calls on every request.
        ("/v1/completions/render", with_field({"model": MODEL_NAME, "prompt": "x"}, "guided_json", DEEP), "guided_json"),
    ]
    for path, body, field in cases:
        r = post(server, path, body)
        assert r.status_code == 400, (path, field, r.text[:300])
        assert r.json()["error"]["param"] == field, r.text[:300]
    assert server.proc.poll() is None, server.log_tail()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def compile_storm(server, n: int, results: list) -> list[threading.Thread]:
    """`n` requests, each with its own schema of 1,000 properties (a few tenths of a second to
    compile on one core)."""
    def one(i: int) -> None:
        schema = {"type": "object", "properties": {f"p{i}_{k}": {"type": "integer"} for k in range(1000)}}
        body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1, "guided_json": schema}
        results.append(httpx.post(server.url + "/v1/completions", json=body, timeout=300).status_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def outstanding_compiles(server) -> float:
    return server.metric("optimate:grammar_compiles_waiting") + server.metric("optimate:grammar_compiles_running")


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory):
    """No request of a storm may time out waiting for its grammar, however slow the machine."""
    s = Server(tmp_path_factory.mktemp("patient"), "--grammar-compile-timeout", "900")
    yield s
    assert s.stop() == 0, s.log_tail()


def test_health_and_other_clients_are_served_during_a_compile_storm(patient_server):
    server = patient_server
    results = []
    threads = compile_storm(server, 16, results)
    try:
        deadline = time.monotonic() + 120
        while server.metric("optimate:grammar_compiles_waiting") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.metric("optimate:grammar_compiles_waiting") > 0, "the storm never queued"
        # While grammars wait for a compile thread, the network threads answer everyone else.
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        r = httpx.post(server.url + "/v1/completions", timeout=60,
                       json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1})
        assert r.status_code == 200, r.text
        assert outstanding_compiles(server) > 0, "answered only once the storm was over"
    finally:
        for t in threads:
            t.join(timeout=300)
    assert results == [200] * 16
    # Schemas that compiled for seconds to minutes are refused at once.
    def nested(depth: int) -> dict:
        schema = {"type": "string"}
        for _ in range(depth):
            schema = {"type": "array", "items": schema}
        return schema

    huge_enum = {"enum": [f"v{i}" for i in range(100_000)]}
    long_enum = {"enum": list(range(5000))}
    for schema, named in ((nested(400), "deeper than 128"), (nested(100), "deeper than 64"),
                          (huge_enum, "more than the 262144 allowed"), (long_enum, "`enum`")):
        r = httpx.post(server.url + "/v1/completions", timeout=60,
                       json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 1, "guided_json": schema})
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text[:300]


@pytest.fixture(scope="module")
def impatient_server(tmp_path_factory):
    # Compiles in a child process are stopped at half the timeout: 2 s.
    s = Server(tmp_path_factory.mktemp("impatient"), "--grammar-compile-timeout", "4",
               "--grammar-compile-threads", "2")
    yield s
    assert s.stop() == 0, s.log_tail()


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_compile_past_the_timeout_is_stopped_and_frees_its_thread(impatient_server):
    """Regexes the grammar engine takes minutes over (docs/openai-compatibility.md) hold both
    compile threads: each is a 400 at the timeout and its compile is stopped, so the threads are
    free again at once and the next grammar compiles, instead of every structured-output request
    getting 503s for minutes."""
    server = impatient_server
    slow = ["((.{0,30}){0,30}){0,30}", "((.{0,31}){0,30}){0,30}"]
    answers = []

    def one(regex: str) -> None:
        body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1, "guided_regex": regex}
        answers.append(httpx.post(server.url + "/v1/completions", json=body, timeout=120))

    threads = [threading.Thread(target=one, args=(r,)) for r in slow]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [a.status_code for a in answers] == [400, 400], [a.text for a in answers]
    for a in answers:
        assert a.json()["error"]["param"] == "guided_regex"
        assert "longer than 2 s" in a.json()["error"]["message"], a.text
    deadline = time.monotonic() + 20
    while outstanding_compiles(server) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outstanding_compiles(server) == 0, "the slow compiles still hold the threads"
    assert len(children(server.proc.pid)) <= 2, "stopped compiles left processes behind"
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"model": MODEL_NAME, "prompt": "Yes or no?", "max_tokens": 3, "guided_regex": "(yes|no)"})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("yes", "no")
    # A JSON schema's pattern is stopped the same way (this one compiles for more than 10 s).
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "((.{0,10}){0,10}){0,10}"}}}
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"model": MODEL_NAME, "prompt": "x", "max_tokens": 1, "guided_json": schema})
    assert r.status_code == 400 and "longer than 2 s" in r.json()["error"]["message"], r.text
    deadline = time.monotonic() + 20
    while outstanding_compiles(server) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outstanding_compiles(server) == 0, "the slow compile still holds its thread"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms


def test_many_keys_cost_linear_time(server):
    """The server's CPU time for a body of 200,000 keys against one of 1,000, as a ratio (a
    quadratic parser took 14 s for 100,000)."""
    def body(n: int) -> str:
        keys = ",".join(f'"k{i}": {i}' for i in range(n))
        # An unknown model: answered right after parsing, nothing generated.
        return '{"model": "no-such-model", "prompt": "x", "unused": {' + keys + "}}"

    small, large = body(1000), body(200_000)
    with httpx.Client(timeout=120) as c:
        headers = {"Content-Type": "application/json"}
        start = cpu_seconds(server.proc.pid)
        for _ in range(200):
            assert c.post(server.url + "/v1/completions", content=small, headers=headers).status_code == 404
        small_s = (cpu_seconds(server.proc.pid) - start) / 200
        start = cpu_seconds(server.proc.pid)
        r = c.post(server.url + "/v1/completions", content=large, headers=headers)
        large_s = cpu_seconds(server.proc.pid) - start
    assert r.status_code == 404, r.text
    assert large_s < 1000 * max(small_s, 1e-4), (small_s, large_s)
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_integers_past_int64_and_field_names(client, server):
    for field in ("priority", "truncate_prompt_tokens"):
        r = post(server, "/v1/completions",
                 '{"model": "%s", "prompt": "hi", "%s": 18446744073709551615}' % (MODEL_NAME, field))
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                       logprobs=True, top_logprobs=30, max_tokens=2)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                       max_completion_tokens=100_000)
    assert e.value.body["param"] == "max_completion_tokens"


def test_schema_keywords_the_engine_would_drop_are_refused_by_name(client):
    cases = [
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "`not`"),
        ({"$ref": "http://example.com/s.json"}, "`$ref`"),
        ({"$ref": "file:///etc/passwd"}, "`$ref`"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "`allOf`"),
        ({"type": "string", "format": "credit-card"}, "`format`"),
    ]
    for schema, keyword in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=MODEL_NAME, max_tokens=5, messages=[{"role": "user", "content": "hi"}],
                response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
        assert e.value.body["param"] == "response_format"
        assert keyword in e.value.body["message"], e.value.body["message"]
        assert len(e.value.body["message"]) < 1000


def test_with_an_api_key_the_cache_and_admin_paths_need_it(guarded_server):
    url = guarded_server.url
    # A web page can post a form to any address: without the key it changes nothing.
    for path in ("/flush_cache", "/reset_prefix_cache"):
        r = httpx.post(url + path, headers={"Origin": "https://evil.example"}, timeout=30)
        assert r.status_code == 401, (path, r.text)
        r = httpx.post(url + path, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
        assert r.status_code == 200, (path, r.text)
    assert httpx.get(url + "/server_info", timeout=30).status_code == 401
    assert httpx.get(url + "/health", timeout=30).status_code == 200
    assert httpx.get(url + "/metrics", timeout=30).status_code == 200


def test_no_absolute_path_leaves_the_server(server):
    for path in ("/server_info", "/model_info", "/get_server_info", "/get_model_info", "/v1/models"):
        text = httpx.get(server.url + path, timeout=30).text
        assert str(Path(__file__).resolve().parents[2]) not in text, (path, text)
        assert '"/' not in text, (path, text)
    info = httpx.get(server.url + "/server_info", timeout=30).json()
    assert info["model_path"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
