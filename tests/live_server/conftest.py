"""Fixtures that run `optimate serve` on the embedded model over loopback.

OPTIMATE_BIN names the binary (default: build/optimate under the repository root),
OPTIMATE_MODEL the model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf), and
OPTIMATE_SERVE_ARGS extra `optimate serve` flags for every server (e.g. "--device cuda").
"""

import os
import random
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
MODEL_NAME = "smollm2"
API_KEY = "test-key-123"


def _resolve(env: str, default: str) -> Path:
    path = Path(os.environ.get(env, default))
    return path if path.is_absolute() else ROOT / path


BIN = _resolve("OPTIMATE_BIN", "build/optimate")
MODEL = _resolve("OPTIMATE_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")


_ports_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: a port the kernel hands out
    (bind to port 0) can be taken as the source port of any outgoing connection (a router's
    health check) before the server binds it, and the server then fails with EADDRINUSE."""
    high = _ephemeral_low() - 1
    for _ in range(1000):
        port = random.randint(max(1024, high - 12000), high)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


class Server:
    """One `optimate serve` process; stopped with SIGTERM (a graceful drain)."""

    def __init__(self, tmp_dir: Path, *extra: str, port: int | None = None):
        if not BIN.exists():
            raise FileNotFoundError(f"{BIN} not found: build the `optimate` target or set OPTIMATE_BIN")
        if not MODEL.exists():
            raise FileNotFoundError(f"{MODEL} not found: run scripts/setup.sh or set OPTIMATE_MODEL")
        self.tmp_dir, self.extra = tmp_dir, extra
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_dir / f"serve-{self.port}.log"
        args = [str(BIN), "serve", "--model", str(MODEL), "--host", "127.0.0.1",
                "--port", str(self.port), "--served-model-name", MODEL_NAME,
                "--kv-cache-memory", "512MiB", "--seed", "7",
                *shlex.split(os.environ.get("OPTIMATE_SERVE_ARGS", "")), *extra]
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def log_tail(self, num_chars: int = 3000) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-num_chars:]

    def access_log(self) -> list[str]:
        """The --access-log lines written so far: 'ADDR "METHOD TARGET HTTP/1.1" STATUS BYTESB SECONDSs'."""
        return [line for line in self.log_path.read_text(errors="replace").splitlines()
                if '" ' in line and " HTTP/1." in line]

    def kill(self) -> None:
        """Dies at once, as a crashed replica would."""
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def restart(self) -> "Server":
        """A new process on the same port with the same flags."""
        return Server(self.tmp_dir, *self.extra, port=self.port)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"optimate serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"optimate serve did not become healthy:\n{self.log_tail()}")

    def metrics(self) -> dict:
        """Every sample of /metrics as {(name, frozenset(labels.items())): value}."""
        text = httpx.get(self.url + "/metrics", timeout=10.0).text
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return out

    def metric(self, name: str, **labels) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total, found = 0.0, False
        for (sample_name, sample_labels), value in self.metrics().items():
            if sample_name == name and set(labels.items()) <= sample_labels:
                total += value
                found = True
        assert found, f"/metrics has no sample {name} {labels}"
        return total

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until no request runs or waits and no KV block is held."""
        deadline = time.monotonic() + timeout_s
        state = None
        while time.monotonic() < deadline:
            state = (self.metric("vllm:num_requests_running"), self.metric("vllm:num_requests_waiting"),
                     self.metric("optimate:kv_cache_used_blocks"))
            if state == (0, 0, 0):
                return
            time.sleep(0.1)
        raise AssertionError(f"server not idle after {timeout_s}s: running, waiting, used blocks = {state}")

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    # A short read timeout lets the partial-request test finish quickly.
    s = Server(tmp_path_factory.mktemp("serve"), "--http-read-timeout", "3", "--access-log")
    yield s
    code = s.stop()
    assert code == 0, f"optimate serve exited with {code}:\n{s.log_tail()}"


@pytest.fixture(scope="session")
def guarded_server(tmp_path_factory):
    """With --api-key, and a queue limit of 0 so every generation request is refused."""
    s = Server(tmp_path_factory.mktemp("guarded"), "--api-key", API_KEY, "--max-num-queued-reqs", "0")
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120.0)

