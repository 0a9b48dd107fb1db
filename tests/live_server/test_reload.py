"""Hot configuration and rollback on a live server: --config reloaded on SIGHUP and when the
file changes, an invalid file rejected whole, the version in GET /v1/optimizers and /metrics,
rollback and restore by request, and the decision log and recorded trace on disk."""

import json
import os
import signal
import time

import httpx
import pytest

from conftest import MODEL_NAME, Server


def status(server: Server) -> dict:
    r = httpx.get(server.url + "/v1/optimizers", timeout=30.0)
    assert r.status_code == 200, r.text
    return r.json()


def wait_version(server: Server, version: int, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    body = status(server)
    while body["config"]["version"] != version and time.monotonic() < deadline:
        time.sleep(0.2)
        body = status(server)
    assert body["config"]["version"] == version, json.dumps(body["config"])
    return body


def complete(server: Server, priority: int = 0) -> None:
    r = httpx.post(server.url + "/v1/completions", timeout=120.0,
                   json={"model": MODEL_NAME, "prompt": "hello", "max_tokens": 3, "priority": priority})
    assert r.status_code == 200, r.text


@pytest.fixture
def reloading(tmp_path):
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\nmax_num_seqs = 8\n\n[optimizers.priority]\nlevels = 3\n")
    s = Server(tmp_path, "--config", str(config), "--decision-log", str(tmp_path / "decisions.jsonl"),
               "--record-trace", str(tmp_path / "trace.jsonl"))
    yield s, config, tmp_path
    assert s.stop() == 0, s.log_tail()


def test_reload_on_change_and_on_sighup(reloading):
    server, config, tmp = reloading
    assert status(server)["config"]["version"] == 1
    complete(server, 2)
    # A changed file is picked up by itself; block_size needs a restart and is only reported.
    config.write_text("[engine]\nmax_num_seqs = 4\nblock_size = 32\n\n[optimizers.priority]\nlevels = 2\n"
                      "\n[optimizers.adaptive]\nttft_p99_ms = 1000\n")
    body = wait_version(server, 2)
    reload = body["config"]["last_reload"]
    assert reload["result"] == "applied" and reload["trigger"] == "file changed"
    assert [c["key"] for c in reload["needs_restart"]] == ["block_size"]
    by_name = {o["name"]: o for o in body["data"]}
    assert by_name["adaptive"]["enabled"] and by_name["priority"]["options"] == {"levels": 2}
    complete(server, 1)
    assert server.metric("optimate:config_version") == 2

    # An invalid file changes nothing and says why.
    config.write_text("[engine]\nmax_num_seqs = \"many\"\n")
    deadline = time.monotonic() + 20
    while status(server)["config"]["last_reload"]["result"] != "invalid" and time.monotonic() < deadline:
        time.sleep(0.2)
    reload = status(server)["config"]["last_reload"]
    assert reload["result"] == "invalid" and "max_num_seqs" in reload["error"]
    assert status(server)["config"]["version"] == 2
    assert server.metric("optimate:config_reloads_total", result="invalid") >= 1

    # SIGHUP reloads on demand.
    config.write_text("[engine]\nmax_num_seqs = 6\n")
    server.proc.send_signal(signal.SIGHUP)
    body = wait_version(server, 3)
    assert {o["name"] for o in body["data"] if not o["baseline"]} == set()
    complete(server)

    trace = [json.loads(line) for line in (tmp / "trace.jsonl").read_text().splitlines()]
    assert [r["priority"] for r in trace] == [2, 1, 0]
    assert all(set(r) == {"arrival_s", "prompt_len", "max_tokens", "priority"} for r in trace)
    events = [json.loads(line)["event"] for line in (tmp / "decisions.jsonl").read_text().splitlines()]
    assert events.count("config") == 2


def test_rollback_and_restore(reloading):
    server, _, tmp = reloading
    complete(server, 1)
    r = httpx.post(server.url + "/v1/optimizers/rollback", timeout=30.0)
    assert r.status_code == 200, r.text
    listed = {o["name"]: o for o in r.json()["data"]}
    assert listed["priority"]["enabled"] is False and listed["priority"]["rolled_back"] is True
    assert listed["fcfs"]["baseline"] is True
    complete(server)
    r = httpx.post(server.url + "/v1/optimizers/restore", timeout=30.0)
    assert r.status_code == 200, r.text
    assert {o["name"]: o for o in r.json()["data"]}["priority"]["enabled"] is True
    events = [json.loads(line)["event"] for line in (tmp / "decisions.jsonl").read_text().splitlines()]
    assert events[-2:] == ["rollback", "restore"]
    assert server.metric("optimate:optimizer_seconds_total", optimizer="priority") > 0


def wait_reload(server: Server, result: str, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    body = status(server)
    while (body["config"]["last_reload"] or {}).get("result") != result and time.monotonic() < deadline:
        time.sleep(0.2)
        body = status(server)
    assert (body["config"]["last_reload"] or {}).get("result") == result, json.dumps(body["config"])
    return body


def test_an_empty_file_or_a_directory_is_refused_and_the_running_configuration_kept(reloading):
    server, config, _ = reloading
    before = status(server)
    assert before["config"]["version"] == 1
    # Truncated (an editor caught mid-write, a mistaken `> engine.toml`): not "every default".
    config.write_text("")
    body = wait_reload(server, "invalid")
    assert "is empty" in body["config"]["last_reload"]["error"], body["config"]
    assert body["config"]["version"] == 1
    priority = {o["name"]: o for o in body["data"]}["priority"]
    assert priority["enabled"] and priority["options"] == {"levels": 3}
    # A directory where the file was, found on SIGHUP.
    config.unlink()
    config.mkdir()
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "directory" not in (status(server)["config"]["last_reload"] or {}).get("error", "") and time.monotonic() < deadline:
        time.sleep(0.2)
    body = status(server)
    assert "is a directory" in body["config"]["last_reload"]["error"], body["config"]
    assert "/" not in body["config"]["last_reload"]["error"]  # no absolute path leaves the server
    assert body["config"]["version"] == 1
    assert {o["name"]: o for o in body["data"]}["priority"]["options"] == {"levels": 3}
    complete(server, 2)
    # A named pipe where the file was: opening it to read would wait for a writer, on the thread
    # that handles signals. Refused on SIGHUP, and that thread still reloads a good file after it.
    config.rmdir()
    os.mkfifo(config)
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "regular file" not in (status(server)["config"]["last_reload"] or {}).get("error", "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "not a regular file" in status(server)["config"]["last_reload"]["error"], status(server)["config"]
    config.unlink()
    config.write_text("[engine]\nmax_num_seqs = 8\n\n[optimizers.priority]\nlevels = 2\n")
    wait_version(server, 2)
