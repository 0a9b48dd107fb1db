"""The plugin's entry points: the engine-core utility the general plugin installs, and the
/v1/optimizers routes and optimate:* series the endpoint plugin adds to vLLM's API server,
served by FastAPI's test client against a scheduler in this process (vLLM's engine client is
replaced by one that calls the utility directly, as vLLM's engine core would)."""

import asyncio

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from conftest import request
from optimate.vllm import plugin


class EngineCore:
    """The part of vLLM's EngineCore the utility uses."""

    def __init__(self, scheduler):
        self.scheduler = scheduler


class EngineCoreClient:
    def __init__(self, core):
        self.core = core

    async def call_utility_async(self, method, *args):
        return getattr(self.core, method)(*args)


class EngineClient:
    def __init__(self, core):
        self.engine_core = EngineCoreClient(core)


@pytest.fixture
def served(make, monkeypatch):
    from vllm.v1.engine.core import EngineCore as VllmEngineCore

    plugin.register()
    plugin.register()  # vLLM may load a general plugin twice
    assert getattr(VllmEngineCore, plugin.UTILITY) is plugin._optimate_optimizers
    monkeypatch.setattr(EngineCore, plugin.UTILITY, plugin._optimate_optimizers, raising=False)
    scheduler = make({"optimizers": {"priority": {}}})
    endpoint = plugin.OptimizersEndpoint()
    app = FastAPI()
    endpoint.attach_router(app)
    endpoint.engine_client = EngineClient(EngineCore(scheduler))
    return scheduler, endpoint, TestClient(app)


def test_list_update_rollback_restore(served):
    scheduler, _, http = served
    body = http.get("/v1/optimizers").json()
    assert body["object"] == "list"
    assert {o["name"]: o["enabled"] for o in body["data"]}["priority"] is True

    r = http.put("/v1/optimizers/predictive", json={"options": {"max_wait_ms": 20}})
    assert r.status_code == 200 and scheduler.optimate_host.owner("batch") == "predictive"
    r = http.post("/v1/optimizers/rollback")
    assert r.status_code == 200 and r.json()["rolled_back"]
    assert all(not o["enabled"] for o in r.json()["data"] if not o["baseline"])
    assert scheduler.optimate_host.owner("queue") == ""
    r = http.post("/v1/optimizers/restore")
    assert r.status_code == 200 and scheduler.optimate_host.owner("queue") == "priority"


def test_bad_requests_get_clear_errors(served):
    _, _, http = served
    r = http.put("/v1/optimizers/kv_quant", json={})
    assert r.status_code == 404 and "does not run inside vLLM" in r.json()["error"]["message"]
    r = http.put("/v1/optimizers/priority", json={"options": {"levels": "many"}})
    assert r.status_code == 400 and "levels" in r.json()["error"]["message"]
    assert http.put("/v1/optimizers/priority", json={"enabled": "yes"}).status_code == 400
    assert http.put("/v1/optimizers/priority", content=b"not json").status_code == 400
    for value in ([1, 2], None, {"a": 1}):
        r = http.put("/v1/optimizers/priority", json={"options": {"levels": value}})
        assert r.status_code == 400 and "options.levels must be a bool, number or string" in r.json()["error"]["message"]


def test_a_vllm_without_the_scheduler_says_so(make):
    from conftest import VllmScheduler

    core = EngineCore(make(cls=VllmScheduler))
    with pytest.raises(ValueError, match="--scheduler-cls optimate.vllm.Scheduler"):
        plugin._optimate_optimizers(core, "list")


def test_metrics_collector_serves_the_engine_cores_series(served, driver):
    scheduler, endpoint, _ = served
    d = driver(scheduler)
    d.add(request("a", priority=0))
    d.step()

    async def refresh_once():
        endpoint.collector.text = await endpoint.call("metrics")

    asyncio.run(refresh_once())
    names = {family.name for family in endpoint.collector.collect()}
    assert {"optimate:optimizer_seconds", "optimate:batch_size", "optimate:num_requests_waiting_by_priority"} <= names
