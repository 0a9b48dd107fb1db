"""Request values against vLLM's own validation: the same bodies sent to `optimate serve` and
given to vLLM 0.26's CompletionRequest / ChatCompletionRequest (pydantic, as its server reads
them) and to_sampling_params. A value both take must mean the same thing; one vLLM refuses must
be a 400 here, and one it takes a 200.

The values are the forms pydantic's lax mode converts (numbers written as strings, with white
space and digit-group underscores; booleans as numbers and words) and forms it refuses. Left
out, as quirks of vLLM's validators rather than conversions: nulls, numeric strings for the
logprobs fields (vLLM compares the raw string to an int and fails), booleans of `stream` (vLLM
tests the raw value's truth), and non-finite numbers.
"""
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.serve.utils.api_utils import get_max_tokens

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("OPTIMATE_BIN", ROOT / "build" / "optimate"))
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_MODEL_LEN = 8192

VALUES = ['"2"', '" 2 "', '"\\u00a02\\u3000"', '"1_0"', '"2.0"', '"2.5"', '"1e1"', '"0x10"', '"0.5"', '" 1e-1 "',
          'true', 'false', '1', '0', '0.5', '"true"', '"YES"', '"off"', '"t"', '"maybe"', '""', '[]', '{}']

COMPLETION = {"prompt": "The capital of France is", "max_tokens": 2, "ignore_eos": True}
CHAT = {"messages": [{"role": "user", "content": "Say something"}], "max_tokens": 2, "ignore_eos": True}
CASES = [("completions", COMPLETION, [f]) for f in (
    "max_tokens", "n", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "include_stop_str_in_output", "echo")]
CASES += [("completions", {**COMPLETION, "max_tokens": 20}, ["min_tokens"]),
          ("completions", {**COMPLETION, "stop_token_ids": [None]}, ["stop_token_ids", 0]),
          ("completions", {**COMPLETION, "logit_bias": {"5": None}}, ["logit_bias", "5"]),
          ("chat", CHAT, ["max_completion_tokens"]), ("chat", CHAT, ["temperature"]),
          ("chat", CHAT, ["logprobs"]), ("chat", CHAT, ["add_generation_prompt"])]


def body_with(base: dict, path: list, raw: str) -> str:
    body = json.loads(json.dumps(base))
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@VALUE@"
    return json.dumps(body).replace('"@VALUE@"', raw)


def vllm_reads(endpoint: str, text: str):
    """vLLM's SamplingParams for the body, or None where its server answers 400."""
    cls = CompletionRequest if endpoint == "completions" else ChatCompletionRequest
    try:
        request = cls.model_validate(json.loads(text))
        wanted = request.max_tokens if endpoint == "completions" else (
            request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens)
        max_tokens = get_max_tokens(MAX_MODEL_LEN, wanted, 16, {})
        return request.to_sampling_params(max_tokens, {})
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return None


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    if not BIN.exists() or not MODEL.exists():
        pytest.fail(f"needs {BIN} and {MODEL} (scripts/test.sh builds and fetches them)")
    port = 18000 + os.getpid() % 1000
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN), "serve", "--model", str(MODEL), "--device", "cpu", "--host",
                                 "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN)],
                                stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                assert proc.poll() is None, log.read_text()[-2000:]
                time.sleep(0.1)  # polls the server's start; no assertion waits on the clock
        yield base
    finally:
        proc.terminate()
        proc.wait()


def post(url: str, endpoint: str, text: str):
    request = urllib.request.Request(f"{url}/v1/{'completions' if endpoint == 'completions' else 'chat/completions'}",
                                     data=text.encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("endpoint,base,path", CASES, ids=[f"{e}-{'.'.join(map(str, p))}" for e, _, p in CASES])
def test_values_are_taken_and_refused_as_vllm_takes_and_refuses_them(url, endpoint, base, path):
    wrong = []
    for raw in VALUES:
        text = body_with(base, path, raw)
        params = vllm_reads(endpoint, text)
        status, answer = post(url, endpoint, text)
        if (params is None) != (status == 400) or status not in (200, 400):
            wrong.append(f"{raw}: vLLM {'400' if params is None else 'takes it'}, here {status} "
                         f"{answer.get('error', {}).get('message', '')[:100]}")
            continue
        if params is None:
            continue
        # What the value means, where the answer shows it.
        if path[0] in ("max_tokens", "max_completion_tokens") and answer["usage"]["completion_tokens"] != params.max_tokens:
            wrong.append(f"{raw}: {answer['usage']['completion_tokens']} tokens, vLLM's max_tokens {params.max_tokens}")
        if path[0] == "n" and len(answer["choices"]) != params.n:
            wrong.append(f"{raw}: {len(answer['choices'])} choices, vLLM's n {params.n}")
        if path[0] == "logprobs" and (answer["choices"][0].get("logprobs") is not None) != (params.logprobs is not None):
            wrong.append(f"{raw}: logprobs {answer['choices'][0].get('logprobs') is not None}, vLLM's {params.logprobs}")
    assert not wrong, "\n".join(wrong)
