"""Replicas behind the routers vLLM and SGLang fleets use: vllm-router 0.1.17 and sglang-router
0.3.2 from PyPI (tests/live_server/requirements.txt), each in front of two `optimate serve` replicas.

What the routers call on a replica must answer in the shape they parse (load-aware routing,
model discovery, cache flush, cache-aware render), with no 404 anywhere in their traffic, and a
replica killed and restarted mid-run must cost no request.
"""

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import MODEL_NAME, Server, free_port

ROUTER_BIN = {"vllm": Path(sys.executable).parent / "vllm-router", "sglang": Path(sys.executable).parent / "smg"}
# Four KV blocks' worth of shared prompt: enough for prefix caching and cache-aware routing.
SHARED_PREFIX = "You are a careful assistant who answers briefly. " * 6


def wait_for(what: str, condition, timeout_s: float = 60.0, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class Router:
    """A vllm-router or sglang-router process in front of `replicas`."""

    def __init__(self, kind: str, tmp_dir: Path, replicas: list, policy: str, *extra: str):
        exe = ROUTER_BIN[kind]
        if not exe.exists():
            raise FileNotFoundError(f"{exe} not found: tests/live_server/run.sh installs the routers")
        self.kind, self.port = kind, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_dir / f"{kind}-router-{policy}-{self.port}.log"
        args = [str(exe), *(["launch"] if kind == "sglang" else []),
                "--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
                "--worker-urls", *[r.url for r in replicas],
                "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
                "--prometheus-port", str(free_port()), *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(f"{kind}-router to list the model", lambda: self.ready(len(replicas)), timeout_s=90)

    def ready(self, num_replicas: int) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
        try:
            if self.kind == "sglang":
                workers = httpx.get(self.url + "/workers", timeout=2).json()["workers"]
                return len(workers) == num_replicas and all(w["is_healthy"] for w in workers)
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def complete(self, prompt: str, max_tokens: int = 2, stream: bool = False) -> httpx.Response:
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                "stream": stream, "temperature": 0.0}
        return httpx.post(self.url + "/v1/completions", json=body, timeout=60.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def served(replica) -> float:
    return replica.metric("vllm:request_success_total")


def count_lines(replica, needle: str) -> int:
    return sum(needle in line for line in replica.access_log())


def no_404_in(replicas) -> None:
    for r in replicas:
        missing = [line for line in r.access_log() if '" 404 ' in line]
        assert not missing, missing[:5]


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def fleet(request, tmp_path_factory):
    """Two replicas answering /get_load as this router reads it, and the router's kind."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"fleet-{kind}")
    # One thread each: two replicas share this machine's cores.
    replicas = [Server(tmp, "--access-log", "--get-load-format", kind, "--num-threads", "1") for _ in range(2)]
    yield kind, tmp, replicas
    for r in replicas:
        r.stop()


@pytest.fixture(scope="module")
def p2c(fleet):
    kind, tmp, replicas = fleet
    router = Router(kind, tmp, replicas, "power_of_two")
    yield router
    router.stop()


def test_model_discovery(fleet, p2c):
    kind, _, replicas = fleet
    models = httpx.get(p2c.url + "/v1/models", timeout=30).json()
    assert MODEL_NAME in [m["id"] for m in models["data"]]
    info = httpx.get(p2c.url + "/get_model_info", timeout=30).json()
    assert info["is_generation"] is True and info["model_path"].endswith(".gguf")
    if kind == "sglang":
        # sglang-router registers each worker under the served name it reads from /server_info.
        workers = httpx.get(p2c.url + "/workers", timeout=30).json()["workers"]
        assert sorted(w["model_id"] for w in workers) == [MODEL_NAME, MODEL_NAME]
        assert all(count_lines(r, '"GET /server_info HTTP/1.1" 200') >= 1 for r in replicas)
        assert all(count_lines(r, '"GET /model_info HTTP/1.1" 200') >= 1 for r in replicas)
    else:
        assert httpx.get(p2c.url + "/get_server_info", timeout=30).json()["served_model_name"] == MODEL_NAME


def test_power_of_two_routes_by_real_load(fleet, p2c):
    kind, _, replicas = fleet
    busy, idle = replicas
    body = {"model": MODEL_NAME, "prompt": "Count:", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    stop = threading.Event()

    def hold_a_stream() -> None:
        with httpx.Client(timeout=120) as c, c.stream("POST", busy.url + "/v1/completions", json=body) as r:
            for _ in r.iter_lines():
                if stop.is_set():
                    return  # closing the connection aborts the request

    streams = [threading.Thread(target=hold_a_stream) for _ in range(2)]
    for t in streams:
        t.start()
    try:
        wait_for("two requests running on the busy replica",
                 lambda: busy.metric("vllm:num_requests_running") >= 2)
        # Wait until the router has polled both replicas since the load appeared.
        seen = [count_lines(r, '"GET /get_load HTTP/1.1" 200') for r in replicas]
        wait_for("the router to poll /get_load", lambda: all(
            count_lines(r, '"GET /get_load HTTP/1.1" 200') >= n + 2 for r, n in zip(replicas, seen)))
        before = [served(r) for r in replicas]
        for i in range(4):
            assert p2c.complete(f"Request {i}:").status_code == 200
        assert [served(r) - b for r, b in zip(replicas, before)] == [0, 4]
    finally:
        stop.set()
        for t in streams:
            t.join(timeout=60)
    busy.wait_idle()


def test_cache_flush_reaches_every_replica(fleet, p2c):
    _, _, replicas = fleet

    def hits(r) -> float:
        return r.metric("vllm:prefix_cache_hits_total")

    def ask(r) -> None:
        # Two tokens: the prefill step's counters are published before the reply is sent.
        body = {"model": MODEL_NAME, "prompt": SHARED_PREFIX + "Flush?", "max_tokens": 2}
        assert httpx.post(r.url + "/v1/completions", json=body, timeout=60).status_code == 200

    for r in replicas:
        ask(r)
        before = hits(r)
        ask(r)
        assert hits(r) > before  # the cache works
    cached = [hits(r) for r in replicas]
    assert httpx.post(p2c.url + "/flush_cache", timeout=30).status_code == 200
    for r, before in zip(replicas, cached):
        assert count_lines(r, '"POST /flush_cache HTTP/1.1" 200') >= 1
        ask(r)
        assert hits(r) == before, "the flushed prefix was still served from the cache"


def test_cache_aware_renders_on_the_replicas(fleet):
    kind, tmp, replicas = fleet
    if kind != "vllm":
        pytest.skip("sglang-router's cache_aware policy keeps its own text tree: it calls no replica")
    router = Router(kind, tmp, replicas, "cache_aware")
    try:
        # Prefix-sharing requests stick to one replica.
        before = [served(r) for r in replicas]
        for i in range(4):
            assert router.complete(SHARED_PREFIX + "Same question.").status_code == 200
        assert sorted(served(r) - b for r, b in zip(replicas, before)) == [0, 4]
        before = [served(r) for r in replicas]
        chat = {"model": MODEL_NAME, "max_tokens": 2, "messages": [{"role": "user", "content": SHARED_PREFIX}]}
        for _ in range(3):
            assert httpx.post(router.url + "/v1/chat/completions", json=chat, timeout=60).status_code == 200
        assert sorted(served(r) - b for r, b in zip(replicas, before)) == [0, 3]
        # The router asked every replica to render; with render answered, it never fell back to /tokenize.
        assert all(count_lines(r, '"POST /v1/completions/render HTTP/1.1" 200') >= 4 for r in replicas)
        assert all(count_lines(r, '"POST /v1/chat/completions/render HTTP/1.1" 200') >= 2 for r in replicas)
        assert not any(count_lines(r, "/tokenize") for r in replicas)
    finally:
        router.stop()
    no_404_in(replicas)


def test_kv_aware_routes_by_load_without_kv_events(fleet):
    # The one remaining policy that calls workers for more than generation and health (the
    # others, random, consistent_hash, sticky_least_loaded and manual, decide in the router).
    kind, tmp, replicas = fleet
    if kind != "vllm":
        pytest.skip("kv_aware is vllm-router's")
    router = Router(kind, tmp, replicas, "kv_aware")
    try:
        for i in range(2):
            assert router.complete(SHARED_PREFIX + f"Question {i}?").status_code == 200
    finally:
        router.stop()
    assert all(count_lines(r, '"GET /kv_event_sources HTTP/1.1" 200') >= 1 for r in replicas)
    no_404_in(replicas)


def stream_through(router: Router, prompt: str) -> list[str]:
    """A streamed completion through the router; the finish reasons it reported."""
    finishes = []
    with httpx.Client(timeout=60) as c:
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 3, "ignore_eos": True, "stream": True}
        with c.stream("POST", router.url + "/v1/completions", json=body) as r:
            assert r.status_code == 200, r.read()
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        finishes += [c["finish_reason"] for c in json.loads(line[len("data: "):])["choices"] if c["finish_reason"]]
    return finishes


def test_replica_killed_and_restarted_loses_no_request(fleet):
    kind, tmp, replicas = fleet
    # Round-robin: a request that finds the dead replica is retried on the other one.
    router = Router(kind, tmp, replicas, "round_robin", "--disable-circuit-breaker",
                    "--health-failure-threshold", "1", "--health-success-threshold", "1")
    try:
        for i in range(2):
            assert stream_through(router, f"Before {i}:") == ["length"]
        replicas[1].kill()
        for i in range(4):
            assert stream_through(router, f"While down {i}:") == ["length"]
        replicas[1] = replicas[1].restart()
        restarted = replicas[1]

        def back_in_rotation() -> bool:
            assert stream_through(router, "After:") == ["length"]
            return served(restarted) > 0

        wait_for("the router to route to the restarted replica", back_in_rotation, timeout_s=60)
    finally:
        router.stop()
    no_404_in(replicas)


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def queued_fleet(request, tmp_path_factory):
    """Two replicas that run one sequence at a time, so requests queue; no drain on stop."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"queued-{kind}")
    replicas = [Server(tmp, "--access-log", "--get-load-format", kind, "--num-threads", "1",
                       "--max-num-seqs", "1", "--shutdown-timeout", "0") for _ in range(2)]
    router = Router(kind, tmp, replicas, "power_of_two")
    yield kind, replicas, router
    router.stop()
    for r in replicas:
        r.stop()


def test_power_of_two_counts_the_queued_prompts(queued_fleet):
    """One replica runs a long context; the other a short one with six long prompts queued
    behind it. SGLang counts a waiting request's prompt tokens in its load (and vLLM counts
    requests in flight): both routers must send new requests to the first."""
    kind, (light, loaded), router = queued_fleet
    pending = []

    def send(url: str, prompt, stream: bool) -> None:
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 4000 if stream else 2, "ignore_eos": True,
                "stream": stream}
        try:
            with httpx.Client(timeout=600) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # the replica stopped under it

    def start(url: str, prompt, stream: bool = False) -> None:
        t = threading.Thread(target=send, args=(url, prompt, stream), daemon=True)
        t.start()
        pending.append(t)

    start(light.url, [100] * 500, stream=True)       # ~500 KV tokens, running
    start(loaded.url, "Count:", stream=True)          # a few KV tokens, running
    wait_for("both replicas running", lambda: light.metric("vllm:num_requests_running") == 1 and
             loaded.metric("vllm:num_requests_running") == 1)
    for _ in range(6):
        start(loaded.url, [200] * 200)                # 1,200 prompt tokens, waiting
    wait_for("six requests queued", lambda: loaded.metric("vllm:num_requests_waiting") == 6)
    seen = [count_lines(r, '"GET /get_load HTTP/1.1" 200') for r in (light, loaded)]
    wait_for("the router to poll /get_load", lambda: all(
        count_lines(r, '"GET /get_load HTTP/1.1" 200') >= n + 2 for r, n in zip((light, loaded), seen)))
    for i in range(3):
        start(router.url, f"Routed {i}:")
    wait_for("the routed requests to arrive", lambda: light.metric("vllm:num_requests_waiting") +
             loaded.metric("vllm:num_requests_waiting") == 9)
    assert light.metric("vllm:num_requests_waiting") == 3, f"{kind}-router sent requests to the queued replica"
    assert loaded.metric("vllm:num_requests_waiting") == 6
