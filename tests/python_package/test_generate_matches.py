"""LLM.generate and LLM.chat give, greedily, the text `optimate generate` and `optimate serve`
give for the same prompts."""

import contextlib
import json
import socket
import subprocess
import time
import urllib.request

import pytest

from optimate import LLM, SamplingParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at"]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def llm(model):
    return LLM(model, device="cpu", kv_cache_memory="256MiB", max_model_len=2048)


def cli_generate(optimate_bin, model, prompt, *extra):
    result = subprocess.run([str(optimate_bin), "generate", "--model", model, "--prompt", prompt,
                             "--max-tokens", str(MAX_TOKENS), "--temperature", "0", *extra],
                            capture_output=True, text=True, timeout=300, check=True)
    return result.stdout


def test_generate_equals_the_cli(llm, model, optimate_bin):
    outputs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    assert [o.prompt for o in outputs] == PROMPTS
    for prompt, out in zip(PROMPTS, outputs):
        assert out.outputs[0].text == cli_generate(optimate_bin, model, prompt), prompt


def test_chat_equals_the_cli(llm, model, optimate_bin):
    question = "What is the capital of France?"
    out = llm.chat([{"role": "user", "content": question}], SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    assert out[0].outputs[0].text == cli_generate(optimate_bin, model, question, "--chat")


@contextlib.contextmanager
def start_server(model, optimate_bin, log_dir, *extra):
    """`optimate serve` on a free loopback port until the block ends; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = log_dir / f"serve-{port}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(optimate_bin), "serve", "--model", model, "--host", "127.0.0.1",
                             "--port", str(port), "--served-model-name", "smollm2", *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # until the model is loaded
            assert proc.poll() is None, f"optimate serve exited with {proc.returncode}: {log_path.read_text()}"
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "optimate serve did not become healthy"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def completion(url, prompt, max_tokens):
    body = json.dumps({"model": "smollm2", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)["choices"][0]


@pytest.fixture(scope="module")
def server_url(model, optimate_bin, tmp_path_factory):
    with start_server(model, optimate_bin, tmp_path_factory.mktemp("serve"), "--device", "cpu",
                      "--kv-cache-memory", "256MiB", "--max-model-len", "2048") as url:
        yield url


def test_generate_equals_the_server(llm, server_url):
    outputs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    for prompt, out in zip(PROMPTS, outputs):
        served = completion(server_url, prompt, MAX_TOKENS)
        assert out.outputs[0].text == served["text"], prompt
        assert out.outputs[0].finish_reason == served["finish_reason"]
