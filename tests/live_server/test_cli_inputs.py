"""Bad command-line inputs: each is a clear error naming the problem and exit status 1 (CLI11's
own for a value out of its range), never an abort with an uncaught exception (status 134) and
never a run whose results are lost at the end."""

import os
import struct
import subprocess
import time

import httpx
import pytest

from conftest import BIN, MODEL, ROOT, free_port

PROFILE = ROOT / "profiles" / "h200-llama3-8b.json"


def run(*args, timeout=60):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("flags,words", [
    (["--num-threads", "100000"], "num-threads must be in [0, 1024]"),
    (["--http-threads", "100000"], "--http-threads must be in [1, 1024]"),
    (["--grammar-compile-threads", "100000"], "--grammar-compile-threads must be in [1, 1024]"),
    (["--http-read-timeout", "inf"], "--http-read-timeout must be in (0, 86400]"),
    (["--http-read-timeout", "1e10"], "--http-read-timeout must be in (0, 86400]"),
    (["--grammar-compile-timeout", "inf"], "--grammar-compile-timeout must be in (0, 86400]"),
    (["--num-kv-blocks", "99999999999"], "--num-kv-blocks 99999999999 needs"),
])
def test_serve_refuses_values_past_what_it_can_run(flags, words):
    r = run("serve", "--model", MODEL, "--port", "0", *flags)
    assert r.returncode == 1 and words in r.stderr, (r.returncode, r.stderr)


def test_a_port_out_of_range_names_the_range():
    r = run("serve", "--model", MODEL, "--port", "70000")
    assert r.returncode not in (0, -6, 134) and "65535" in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("seed", ["-1", "18446744073709551616", "1.5"])
def test_a_seed_out_of_range_is_refused_not_wrapped(seed):
    r = run("generate", "--model", MODEL, "--prompt", "hi", "--max-tokens", "1", "--seed", seed)
    assert r.returncode == 1 and "--seed must be an integer in [0, 2^64)" in r.stderr, (r.returncode, r.stderr)


def test_a_gguf_with_a_hidden_size_of_0_names_that_key(tmp_path):
    data = bytearray(MODEL.read_bytes())
    key = b"llama.embedding_length"
    at = data.find(key) + len(key)
    assert struct.unpack_from("<I", data, at)[0] == 4  # GGUF's uint32 type, then the value
    struct.pack_into("<I", data, at + 4, 0)
    model = tmp_path / "hidden0.gguf"
    model.write_bytes(data)
    r = run("generate", "--model", model, "--prompt", "hi", "--max-tokens", "1")
    assert r.returncode == 1 and "llama.embedding_length must be positive, got 0" in r.stderr, (r.returncode, r.stderr)


def test_an_unknown_subcommand_is_named():
    r = run("servee", "--model", MODEL)
    assert r.returncode != 0 and "unknown subcommand 'servee' (one of: generate," in r.stderr, (r.returncode, r.stderr)


def test_tokenize_a_folder_says_so(tmp_path):
    r = run("tokenize", "--model", MODEL, "--file", tmp_path)
    assert r.returncode == 1 and "is a directory" in r.stderr, (r.returncode, r.stderr)


def test_a_pipe_or_a_device_is_refused_not_read(tmp_path):
    """A FIFO would block the open for ever, /dev/zero would never end: both are refused, as a
    configuration, a text file and a model."""
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    r = run("serve", "--model", MODEL, "--port", "0", "--config", fifo)
    assert r.returncode == 1 and "not a regular file" in r.stderr, (r.returncode, r.stderr)
    r = run("perplexity", "--model", MODEL, "--file", "/dev/zero")
    assert r.returncode == 1 and "not a regular file" in r.stderr, (r.returncode, r.stderr)
    model = tmp_path / "model.gguf"
    os.mkfifo(model)
    r = run("generate", "--model", model, "--prompt", "hi")
    assert r.returncode == 1 and "not a regular file" in r.stderr, (r.returncode, r.stderr)


def workload(path, num_requests=8, prompt_max=64):
    path.write_text(f"""
[workload]
name = "cli-inputs"
num_requests = {num_requests}
token_id_range = [1000, 4000]

[workload.arrival]
kind = "offline"

[workload.prompt]
kind = "uniform"
min = 16
max = {prompt_max}

[workload.output]
kind = "fixed"
value = 4
""")
    return path


def test_bench_refuses_a_request_timeout_past_a_day(tmp_path):
    r = run("bench", "--workload", workload(tmp_path / "w.toml"), "--url", "http://127.0.0.1:9",
            "--request-timeout", "inf", "--out", tmp_path / "out")
    assert r.returncode == 1 and "--request-timeout must be in (0, 86400]" in r.stderr, (r.returncode, r.stderr)


def test_bench_refuses_an_output_folder_it_cannot_make_before_running(tmp_path):
    (tmp_path / "a-file").write_text("x")
    r = run("bench", "--workload", workload(tmp_path / "w.toml"), "--backend", "sim", "--profile", PROFILE,
            "--compare", ROOT / "configs" / "baseline.toml", "--out", tmp_path / "a-file" / "sub")
    assert r.returncode == 1 and "cannot create the folder" in r.stderr, (r.returncode, r.stderr)
    assert "Throughput" not in r.stdout  # refused before the run, not after it


@pytest.mark.parametrize("num_requests,prompt_max,words", [
    (100_000_000_000, 64, "num_requests must be at most"),
    (8, 9_000_000_000, "lengths must be at most"),
])
def test_bench_and_advise_refuse_workloads_past_memory(tmp_path, num_requests, prompt_max, words):
    w = workload(tmp_path / "w.toml", num_requests, prompt_max)
    for args in (["advise", "--workload", w, "--profile", PROFILE],
                 ["bench", "--workload", w, "--backend", "sim", "--profile", PROFILE,
                  "--compare", ROOT / "configs" / "baseline.toml", "--out", tmp_path / "out"]):
        r = run(*args, timeout=30)
        assert r.returncode == 1 and words in r.stderr, (args[0], r.returncode, r.stderr)


def test_a_gguf_whose_embedding_is_short_of_its_tokenizer_is_refused(tmp_path):
    # The SmolLM2 file with token_embd.weight's rows cut from 49,152 to 100 in its tensor table:
    # llama.cpp refuses such a file (the token list sizes the embedding), and so does the server.
    data = bytearray(MODEL.read_bytes())
    name = b"token_embd.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims, cols, rows = struct.unpack_from("<IQQ", data, at)
    assert (n_dims, rows) == (2, 49152)
    struct.pack_into("<Q", data, at + 12, 100)
    broken = tmp_path / "short-embedding.gguf"
    broken.write_bytes(bytes(data))
    r = run("serve", "--model", broken, "--port", "0", timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "the tokenizer has 49152 tokens but the token embedding 100 rows" in r.stderr, r.stderr[-2000:]


def test_a_tokenizer_larger_than_the_model_is_a_400_per_request_not_a_failed_one(tmp_path):
    # A Hugging Face folder (256 embedding rows) served with a larger tokenizer (Llama 3's,
    # 128,256 tokens) starts with a warning; a text whose tokens pass row 255 is the client's
    # 400, where it was a 200 whose choice ended "abort" when the engine met the token.
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([str(BIN), "serve", "--model", ROOT / "tests/data/model/tiny_llama",
                             "--tokenizer", ROOT / "models/llama3-tokenizer", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            time.sleep(0.1)
        r = httpx.post(url + "/v1/completions", json={"prompt": "hello there", "max_tokens": 2}, timeout=30.0)
        assert r.status_code == 400 and "past the model's vocabulary of 256" in r.text, r.text
        r = httpx.post(url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2}, timeout=30.0)
        assert r.status_code == 200, r.text
        assert "tokens but the model's vocabulary 256" in (tmp_path / "serve.log").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
