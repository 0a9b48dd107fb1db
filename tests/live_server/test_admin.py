"""Run-time optimizer control: enable, retune and roll back an optimizer without a restart."""

import httpx

from conftest import API_KEY, MODEL_NAME


def optimizers(url: str, headers: dict | None = None) -> dict:
    r = httpx.get(url + "/v1/optimizers", headers=headers, timeout=30.0)
    assert r.status_code == 200, r.text
    return {o["name"]: o for o in r.json()["data"]}


def test_enable_retune_and_roll_back(server):
    r = httpx.put(server.url + "/v1/optimizers/priority", json={"enabled": True, "options": {"levels": 3}})
    assert r.status_code == 200, r.text
    listed = optimizers(server.url)["priority"]
    assert listed["enabled"] and listed["options"] == {"levels": 3}
    # Requests keep being served with the optimizer in place.
    done = httpx.post(server.url + "/v1/completions", timeout=60.0,
                      json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2, "priority": 5})
    assert done.status_code == 200, done.text
    r = httpx.put(server.url + "/v1/optimizers/priority", json={"enabled": False})
    assert r.status_code == 200, r.text
    assert optimizers(server.url)["priority"]["enabled"] is False
    assert optimizers(server.url)["fcfs"]["baseline"] is True


def test_bad_updates(server):
    assert httpx.put(server.url + "/v1/optimizers/no-such-optimizer", json={}).status_code == 404
    assert httpx.put(server.url + "/v1/optimizers/priority", json={"options": {"no_such_knob": 1}}).status_code == 400
    assert httpx.put(server.url + "/v1/optimizers/priority", json={"enabled": "yes"}).status_code == 400
    assert httpx.put(server.url + "/v1/optimizers/priority", content=b"{").status_code == 400


def test_admin_needs_the_api_key(guarded_server):
    url = guarded_server.url + "/v1/optimizers/priority"
    assert httpx.put(url, json={"enabled": True}).status_code == 401
    assert httpx.get(guarded_server.url + "/v1/optimizers").status_code == 401
    r = httpx.put(url, json={"enabled": True}, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200, r.text


def test_a_baseline_cannot_be_disabled(server):
    for name in ("fcfs", "full-precision-kv"):
        r = httpx.put(server.url + f"/v1/optimizers/{name}", json={"enabled": False})
        assert r.status_code == 400 and "baseline" in r.json()["error"]["message"], r.text
    names = [o["name"] for o in httpx.get(server.url + "/v1/optimizers", timeout=30.0).json()["data"]]
    assert len(names) == len(set(names)), names
