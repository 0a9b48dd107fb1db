"""vLLM's plugin entry points (pyproject.toml registers them under the name ``optimate``):

- ``vllm.general_plugins`` -> register(): loaded in every vLLM process; gives vLLM's engine
  core one utility method, ``optimate_optimizers``, through which the API server reaches the
  scheduler (optimate.vllm.Scheduler.optimate_call);
- ``vllm.endpoint_plugins`` -> OptimizersEndpoint: loaded in the API server when the plugin is
  allowlisted (``VLLM_PLUGINS=optimate``, vLLM's rule for plugins that add routes); adds
  ``GET /v1/optimizers``, ``PUT /v1/optimizers/{name}``, ``POST /v1/optimizers/rollback`` and
  ``/restore``, and the optimate:* series on vLLM's ``/metrics``.
"""


import asyncio
import logging
from typing import Any, Optional

logger = logging.getLogger("optimate.vllm")

UTILITY = "optimate_optimizers"
#: How often the API server refreshes the optimate:* series from the engine core.
METRICS_REFRESH_S = 1.0


def _optimate_optimizers(engine_core, op: str, arg: Optional[dict] = None) -> Any:
    call = getattr(engine_core.scheduler, "optimate_call", None)
    if call is None:
        raise ValueError("vLLM runs without Optimate's scheduler: start it with "
                         "--scheduler-cls optimate.vllm.Scheduler")
    return call(op, arg)


def register() -> None:
    """The general plugin: idempotent, as vLLM may load it more than once per process."""
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore, UTILITY, None) is not _optimate_optimizers:
        setattr(EngineCore, UTILITY, _optimate_optimizers)


class OptimateCollector:
    """A prometheus_client collector yielding the optimate:* families the engine core last
    rendered (the scheduler lives in another process)."""

    def __init__(self):
        self.text = ""

    def collect(self):
        from prometheus_client.parser import text_string_to_metric_families

        yield from text_string_to_metric_families(self.text)


class OptimizersEndpoint:
    name = "optimate"
    required_tasks = ("generate",)

    def __init__(self):
        self.engine_client = None
        self.collector = OptimateCollector()
        self._refresh_task: Optional[asyncio.Task] = None

    async def call(self, op: str, arg: Optional[dict] = None):
        if self.engine_client is None:
            raise RuntimeError("no engine")
        results = await self.engine_client.engine_core.call_utility_async(UTILITY, op, arg)
        return results

    def attach_router(self, app) -> None:
        from fastapi import APIRouter, Request
        from fastapi.responses import JSONResponse

        router = APIRouter()

        def error(status: int, message: str, kind: str = "BadRequestError"):
            return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                                status_code=status)

        async def run(op: str, arg: Optional[dict] = None):
            try:
                return await self.call(op, arg)
            except Exception as e:  # the engine core's ValueError comes back as an exception
                text = str(e)
                if "does not run inside vLLM" in text:
                    return error(404, text, "NotFoundError")
                return error(400, text)

        @router.get("/v1/optimizers")
        async def list_optimizers():
            data = await run("list")
            return data if isinstance(data, JSONResponse) else {"object": "list", "data": data}

        @router.post("/v1/optimizers/rollback")
        async def rollback():
            data = await run("rollback")
            return data if isinstance(data, JSONResponse) else {"rolled_back": True, "data": data}

        @router.post("/v1/optimizers/restore")
        async def restore():
            data = await run("restore")
            return data if isinstance(data, JSONResponse) else {"restored": True, "data": data}

        @router.put("/v1/optimizers/{name}")
        async def update(name: str, request: Request):
            try:
                body = await request.json()
            except ValueError:
                return error(400, "the body must be a JSON object")
            if not isinstance(body, dict):
                return error(400, "the body must be a JSON object")
            if "enabled" in body and not isinstance(body["enabled"], bool):
                return error(400, "enabled must be a boolean")
            if "options" in body and not isinstance(body["options"], dict):
                return error(400, "options must be an object")
            for key, value in body.get("options", {}).items():
                if not isinstance(value, (bool, int, float, str)):
                    return error(400, f"options.{key} must be a bool, number or string, got {type(value).__name__}")
            data = await run("update", {"name": name, **{k: body[k] for k in ("enabled", "options") if k in body}})
            return data if isinstance(data, JSONResponse) else {"object": "list", "data": data}

        app.include_router(router)

    async def init_state(self, engine_client, state, args) -> None:
        if engine_client is None:
            return
        self.engine_client = engine_client
        from prometheus_client import REGISTRY

        try:
            REGISTRY.register(self.collector)
        except ValueError:
            logger.warning("optimate: the optimate:* series are already registered in this process")
        self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_metrics())

    async def _refresh_metrics(self) -> None:
        while True:
            try:
                text = await self.call("metrics")
                if isinstance(text, list):  # data parallel: one text per engine
                    text = "".join(text)
                self.collector.text = text
            except Exception as e:  # the engine restarting, or vLLM without our scheduler
                logger.debug("optimate: metrics refresh failed: %s", e)
            await asyncio.sleep(METRICS_REFRESH_S)
