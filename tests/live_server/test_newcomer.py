"""What a newcomer sees first: the README's own request answers sensibly, and the server states at
start which optimizers it runs with their options and the KV cache it planned (debug level adds
every growth and release of the KV pool)."""

import json
import re
import shlex
import subprocess

import httpx

from conftest import BIN, MODEL, ROOT, Server


def readme_chat_request() -> dict:
    """The JSON body of the README's first curl example, as the README has it."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"curl http://127\.0\.0\.1:8000/v1/chat/completions.*?-d '(\{.*?\})'", readme, re.S)
    assert match, "README.md has no chat/completions curl example"
    return json.loads(match.group(1))


def test_the_readmes_first_request_answers_paris(server):
    body = readme_chat_request()
    assert body["messages"][0]["content"] == "What is the capital of France? Answer in one sentence."
    body["model"] = "smollm2"  # the test server's name (the README serves it under this name too)
    # Asked several times: every answer must name Paris (a sampled answer at temperature 1 does
    # so about a third of the time on this model).
    for _ in range(4):
        r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        answer = r.json()["choices"][0]["message"]["content"]
        assert "Paris" in answer, answer


def test_the_readmes_generate_command_answers_paris():
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"build/optimate generate (--model .*?)(#|\n\n|```)", readme, re.S)
    assert match and "What is the capital of France? Answer in one sentence." in match.group(1), "README.md has no generate example"
    args = shlex.split(match.group(1).replace("\\\n", " "))
    args = [str(MODEL) if a.endswith(".gguf") else a for a in args]
    # Run it as written, several times: a sampled answer names Paris about a third of the time.
    for _ in range(3):
        out = subprocess.run([str(BIN), "generate", *args], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        assert "Paris" in out.stdout, out.stdout


def test_the_server_states_its_optimizers_and_kv_cache_at_start(tmp_path):
    s = Server(tmp_path, "--optimizer", "priority:levels=3,aging_ms=100", "--optimizer", "predictive:enabled=false")
    try:
        log = s.log_tail(20000)
    finally:
        assert s.stop() == 0
    # Every option the optimizer runs with: the ones given and the defaults.
    assert re.search(r"optimizer priority on: levels=3, lowest_priority=0 \(default\), aging_ms=100, "
                     r"max_wait_ms=30000 \(default\)", log), log
    assert "optimizer predictive: configured, disabled" in log, log
    assert re.search(r"baselines in the other slots: .*launch-at-once", log), log
    assert re.search(r"KV cache planned: \d+ blocks of 16 tokens at bf16 \(\d+ tokens, [\d.]+ GiB\)", log), log


def test_kv_pool_growth_and_release_at_debug_level(tmp_path):
    s = Server(tmp_path, "--log-level", "debug")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"model": "smollm2", "prompt": "Hello there", "max_tokens": 20,
                                                        "temperature": 0, "ignore_eos": True}, timeout=120)
        assert r.status_code == 200, r.text
        s.wait_idle()
        log = s.log_tail(200000)
    finally:
        assert s.stop() == 0
    assert re.search(r"KV pool: sequence \d+ grows by \d+ bf16 blocks", log), log[-3000:]
    assert re.search(r"KV pool: sequence \d+ releases \d+ blocks; 0\.0% of the pool in use", log), log[-3000:]
