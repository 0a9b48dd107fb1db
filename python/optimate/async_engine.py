"""AsyncLLMEngine: the engine on its own thread, for asyncio servers (vLLM's AsyncLLMEngine).

    engine = AsyncLLMEngine.from_engine_args(EngineArgs(model=...))
    async for output in engine.generate("Hello", SamplingParams(max_tokens=32), "req-1"):
        print(output.outputs[0].text)

The C++ engine thread steps continuously while requests run (the GIL released); each output is
handed to the request's event loop with ``call_soon_threadsafe``. Leaving the ``async for``
early (break, cancellation) aborts the request.
"""

from __future__ import annotations

import asyncio
import atexit
import weakref
from typing import Any, AsyncIterator, Iterable, Mapping, Optional, Union

from optimate import _core
from optimate.engine import (OptimizerLike, PromptType, _make_core, _optimizer_spec, _metadata,
                             _prompt, _resolve_params, engine_args_and_optimizers)
from optimate.engine_args import EngineArgs
from optimate.errors import error_from
from optimate.outputs import OutputTracker, RequestOutput
from optimate.sampling_params import SamplingParams

# Engines still running at interpreter exit are stopped first, while their thread can still take
# the GIL to deliver the last outputs; then each lets go of its C++ half (as LLMEngine's do, so
# that the Python policies it runs are freed before the extension is).
_engines: "weakref.WeakSet[AsyncLLMEngine]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for engine in list(_engines):
        engine.shutdown()
        engine._engine = engine._core_handle = engine._encode = engine._chat_prompt = None


class AsyncLLMEngine:
    """An engine shared by coroutines; ``shutdown()`` (or garbage collection) stops its thread."""

    def __init__(self, engine_args: EngineArgs, optimizers: Iterable[OptimizerLike] = ()):
        engine_args, optimizers = engine_args_and_optimizers(engine_args, optimizers)
        self.engine_args = engine_args
        handle, self._specs = _make_core(engine_args, optimizers, async_mode=True)
        self._encode = handle.encode
        self._chat_prompt = handle.chat_prompt
        self.max_model_len = handle.max_model_len
        self._core_handle = handle  # keeps the tokenizer for encode(); its engine moves below
        self._engine = _core.AsyncEngine(handle)
        self._live: set[str] = set()
        _engines.add(self)

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs,
                         optimizers: Optional[Iterable[OptimizerLike]] = None) -> "AsyncLLMEngine":
        return cls(engine_args, optimizers or ())

    async def generate(self, prompt: PromptType, sampling_params: Optional[SamplingParams],
                       request_id: str, *, metadata: Optional[Mapping[str, Any]] = None,
                       priority: Optional[int] = None) -> AsyncIterator[RequestOutput]:
        """Yields the request's RequestOutput after each step it progressed in (per
        ``sampling_params.output_kind``), the last one with ``finished=True``."""
        if not isinstance(request_id, str):
            raise ValueError(f"request_id must be a str, got {type(request_id).__name__}")
        fields = _metadata(metadata, priority)
        text, ids = _prompt(self._core_handle, prompt)
        params = _resolve_params(sampling_params, len(ids), self.max_model_len)
        if request_id in self._live:
            raise ValueError(f"request id '{request_id}' is already in use")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def deliver(item) -> None:  # on the engine thread
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop has closed: nobody is listening
                pass

        tracker = OutputTracker()
        tracker.add(request_id, text, ids, params)
        self._engine.submit(request_id, ids, params, fields, deliver,
                            lambda message, code: deliver(error_from(message, code)))
        self._live.add(request_id)
        finished = False
        try:
            while not finished:
                batch = [await queue.get()]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                errors = [item for item in batch if isinstance(item, Exception)]
                if errors:
                    finished = True
                    raise errors[0]
                for out in tracker.process(batch):
                    finished = out.finished
                    yield out
        finally:
            self._live.discard(request_id)
            if not finished and self._engine is not None:  # None: released at interpreter exit
                self._engine.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Ends the request; its generator yields a last output with finish_reason "abort"."""
        self._engine.abort(request_id)

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    async def get_optimizers(self) -> list[dict[str, Any]]:
        """As LLMEngine.get_optimizers (asked of the engine thread between steps): fallbacks and
        rollbacks included. Raises EngineError once the engine is shut down."""
        return await asyncio.get_running_loop().run_in_executor(None, self._engine.optimizer_states)

    async def set_optimizer(self, optimizer: Union[OptimizerLike, str], enabled: Optional[bool] = None,
                            **options: Any) -> None:
        """As LLMEngine.set_optimizer, applied between steps."""
        name, opts, on = _optimizer_spec(self._specs, optimizer, enabled, options)
        await asyncio.get_running_loop().run_in_executor(None, self._engine.set_optimizer, name, opts, on)
        self._specs[name] = (opts, on)

    def get_stats(self) -> dict[str, int]:
        """As LLMEngine.get_stats, from the snapshot taken after the latest step."""
        return self._engine.stats()

    @property
    def is_running(self) -> bool:
        return self._engine.running()

    def shutdown(self, drain: bool = False) -> None:
        """Stops the engine thread: aborting every request (or, with drain, finishing them).
        Idempotent; called at interpreter exit for engines still running."""
        self._engine.shutdown(drain)
