"""LLMEngine: the synchronous engine, stepped by the caller (vLLM's LLMEngine loop).

    engine = create_optimized_engine(EngineArgs(model=...), optimizers=[PrioritySchedulerOptimizer()])
    engine.add_request("a", "Hello", SamplingParams(max_tokens=32), metadata={"priority": 5})
    while engine.has_unfinished_requests():
        for output in engine.step():
            ...

step() runs one engine step (schedule, forward pass, sampling) in C++ with the GIL released.
"""

from __future__ import annotations

import atexit
import dataclasses
import weakref
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from optimate import _core
from optimate.engine_args import EngineArgs
from optimate.errors import warn_policy_failure
from optimate.optimizers import Optimizer
from optimate.outputs import OutputTracker, RequestOutput
from optimate.policies import BatchPolicy, QueuePolicy
from optimate.sampling_params import SamplingParams

# An engine still alive at interpreter exit lets go of its C++ half first: a Python policy it
# runs is referenced from C++, where the garbage collector cannot see the cycle through the
# policy's module, so the engine would otherwise outlive the extension (nanobind then reports
# it as leaked). Handlers registered after this import (the user's) run before it.
_engines: "weakref.WeakSet[LLMEngine]" = weakref.WeakSet()


@atexit.register
def _release_all() -> None:
    for engine in list(_engines):
        engine._core = None

# A prompt: text, token ids, or vLLM's {"prompt": text} / {"prompt_token_ids": ids}.
PromptType = Union[str, Sequence[int], Mapping[str, Any]]
OptimizerLike = Union[Optimizer, QueuePolicy, BatchPolicy]


def _split_optimizers(optimizers: Iterable[OptimizerLike]):
    specs, policies = [], []
    for o in optimizers or ():
        if isinstance(o, Optimizer):
            specs.append((o.name, dict(o.options), o.enabled))
        elif isinstance(o, (QueuePolicy, BatchPolicy)):
            policies.append((o.policy_name(), o.kind, o))
            specs.append((o.policy_name(), {}, True))
        else:
            raise ValueError(f"optimizers takes optimate.optimizers classes and QueuePolicy/BatchPolicy "
                            f"instances, got {type(o).__name__}")
    return specs, policies


def engine_args_and_optimizers(engine_args: Union[EngineArgs, Mapping[str, Any]], optimizers):
    """EngineArgs, or the seed's dict of engine arguments whose ``scheduler`` is an optimizer
    (``{"model": ..., "scheduler": PriorityScheduler()}``): (EngineArgs, the optimizers)."""
    if isinstance(engine_args, Mapping):
        settings = dict(engine_args)
        scheduler = settings.pop("scheduler", None)
        given = [] if scheduler is None else list(scheduler) if isinstance(scheduler, (list, tuple)) else [scheduler]
        return EngineArgs(**settings), [*given, *(optimizers or ())]
    if not isinstance(engine_args, EngineArgs):
        raise ValueError(f"engine_args must be EngineArgs or a dict of them, got {type(engine_args).__name__}")
    return engine_args, optimizers


def _make_core(engine_args: EngineArgs, optimizers, async_mode: bool):
    specs, policies = _split_optimizers(optimizers)
    core = _core.Engine(engine_args.engine_settings(), specs, policies, async_mode)
    return core, {name: (dict(options), enabled) for name, options, enabled in specs}


def _metadata(metadata: Optional[Mapping[str, Any]], priority: Optional[int]) -> dict[str, Any]:
    """What the caller tells the scheduler, ``priority=p`` folded in: the priority in the
    convention of the engine argument ``priority_order`` (by default higher-first, the seed's
    rule). The extension checks every key against its RequestMetadata (an unknown key, a
    priority that is not a 64-bit int, a wrong type: ValueError) and converts the priority to
    the engine's order."""
    out = dict(metadata or {})
    if priority is not None:
        if "priority" in out and out["priority"] != priority:
            raise ValueError("priority and metadata['priority'] disagree")
        out["priority"] = priority
    return out


def _token_ids(ids: Any) -> list[int]:
    """Token ids as given: ints (not bools, floats or strings) in int32's range; the engine
    checks them against the vocabulary."""
    if isinstance(ids, (str, bytes, bytearray)) or not isinstance(ids, Sequence):
        raise ValueError(f"token ids must be a list of ints, got {type(ids).__name__}")
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < 2**31:
            raise ValueError(f"token ids must be ints in [0, 2**31), got {t!r}")
    return list(ids)


def _text(text: Any) -> str:
    if not isinstance(text, str):
        raise ValueError(f"a prompt's text must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"a prompt's text must be valid Unicode: {e.reason} at {e.start}") from None
    return text


def _prompt(core, prompt: PromptType) -> tuple[Optional[str], list[int]]:
    if isinstance(prompt, str):
        return prompt, core.encode(_text(prompt))
    if isinstance(prompt, Mapping):
        if "prompt_token_ids" in prompt:
            text = prompt.get("prompt")
            return (None if text is None else _text(text)), _token_ids(prompt["prompt_token_ids"])
        if "prompt" in prompt:
            return prompt["prompt"], core.encode(_text(prompt["prompt"]))
        raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    if isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
        return None, _token_ids(prompt)
    raise ValueError(f"a prompt is a str, a list of token ids or a dict, got {type(prompt).__name__}")


def _resolve_params(params: Optional[SamplingParams], num_prompt_tokens: int, max_model_len: int) -> SamplingParams:
    if params is None:
        params = SamplingParams()
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
    if params.max_tokens is None:  # until the context is full
        params = dataclasses.replace(params, max_tokens=max(1, max_model_len - num_prompt_tokens))
    return params


def _optimizer_spec(specs: dict, optimizer: Union[OptimizerLike, str], enabled: Optional[bool],
                    options: dict) -> tuple[str, dict, bool]:
    if isinstance(optimizer, Optimizer):
        if options:
            raise ValueError("pass options in the optimizer object, not as keywords")
        name, opts, on = optimizer.name, dict(optimizer.options), optimizer.enabled
    elif isinstance(optimizer, (QueuePolicy, BatchPolicy)):
        name, opts, on = optimizer.policy_name(), {}, True
    elif isinstance(optimizer, str):
        name = optimizer
        old_options, on = specs.get(name, ({}, True))
        opts = {**old_options, **options}
    else:
        raise ValueError(f"set_optimizer takes an optimizer, a policy or a name, got {type(optimizer).__name__}")
    if enabled is not None:
        if not isinstance(enabled, bool):
            raise ValueError(f"enabled must be True or False, got {enabled!r}")
        on = enabled
    return name, opts, on


class LLMEngine:
    """The engine, stepped by the caller. Build it with ``create_optimized_engine`` or
    ``LLMEngine.from_engine_args``; it is not thread-safe (AsyncLLMEngine is)."""

    def __init__(self, engine_args: Union[EngineArgs, Mapping[str, Any]], optimizers: Iterable[OptimizerLike] = ()):
        engine_args, optimizers = engine_args_and_optimizers(engine_args, optimizers)
        self.engine_args = engine_args
        self._core, self._specs = _make_core(engine_args, optimizers, async_mode=False)
        _engines.add(self)
        self._tracker = OutputTracker()
        self._held: list[RequestOutput] = []  # outputs of a step whose policy failure was raised

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs,
                         optimizers: Optional[Iterable[OptimizerLike]] = None) -> "LLMEngine":
        return cls(engine_args, optimizers or ())

    @property
    def max_model_len(self) -> int:
        return self._core.max_model_len

    @property
    def description(self) -> str:
        """The backend and model, e.g. "cpu SmolLM2-135M-Instruct.Q4_1.gguf"."""
        return self._core.description

    def encode(self, text: str) -> list[int]:
        """The prompt token ids the engine uses for ``text``."""
        return self._core.encode(text)

    def add_request(self, request_id: str, prompt: PromptType, params: Optional[SamplingParams] = None,
                    arrival_time: Optional[float] = None, *, metadata: Optional[Mapping[str, Any]] = None,
                    priority: Optional[int] = None) -> None:
        """Queues a request. ``metadata={"priority": p}`` (or ``priority=p``): by default a larger
        p is more important (``priority_order="lower-first"``: a smaller one). ValueError for a
        bad prompt, parameters or a request id in use."""
        if not isinstance(request_id, str):
            raise ValueError(f"request_id must be a str, got {type(request_id).__name__}")
        if request_id in self._tracker:
            raise ValueError(f"request id '{request_id}' is already in use")
        fields = _metadata(metadata, priority)
        text, ids = _prompt(self._core, prompt)
        params = _resolve_params(params, len(ids), self._core.max_model_len)
        self._core.add_request(request_id, ids, params, fields)
        self._tracker.add(request_id, text, ids, params, arrival_time)

    def step(self) -> list[RequestOutput]:
        """Runs one step; returns the outputs of the requests that progressed (all of them in
        the step an abort was requested before)."""
        deltas = self._core.step()  # if this raises, held outputs stay held
        held, self._held = self._held, []
        outputs = held + self._tracker.process(deltas)
        failure = self._core.take_policy_failure()
        if failure is not None:
            warn_policy_failure(*failure)
        return outputs

    def abort_request(self, request_id: Union[str, Iterable[str]]) -> None:
        """Ends the request(s); the next step() reports them with finish_reason "abort" and
        their KV blocks are free. Unknown or finished ids are ignored."""
        for rid in [request_id] if isinstance(request_id, str) else list(request_id):
            self._core.abort(rid)

    def has_unfinished_requests(self) -> bool:
        return bool(self._held) or self._core.has_unfinished()

    def get_num_unfinished_requests(self) -> int:
        return len(self._tracker)

    def get_optimizers(self) -> list[dict[str, Any]]:
        """Each optimizer: name, enabled, baseline, options, counters, seconds_total, fallback
        (``{"reason", "detail"}`` after the guard disabled it, else None) and rolled_back: the
        server's GET /v1/optimizers."""
        return self._core.optimizer_states()

    def set_optimizer(self, optimizer: Union[OptimizerLike, str], enabled: Optional[bool] = None,
                      **options: Any) -> None:
        """Enables, retunes or disables an optimizer between steps; disabling falls back to the
        baseline (rollback). ``set_optimizer(PredictiveBatchingOptimizer(max_wait_ms=20))``,
        ``set_optimizer("priority", enabled=False)``, ``set_optimizer("priority", aging_ms=100)``."""
        name, opts, on = _optimizer_spec(self._specs, optimizer, enabled, options)
        self._core.set_optimizer(name, opts, on)
        self._specs[name] = (opts, on)

    def get_stats(self) -> dict[str, int]:
        """num_running, num_waiting, kv_used_blocks, kv_total_blocks, num_steps,
        num_preemptions, num_prompt_tokens, num_generation_tokens, prefix_cache_queries,
        prefix_cache_hits."""
        return self._core.stats()


def create_optimized_engine(engine_args: Union[EngineArgs, Mapping[str, Any]],
                            optimizers: Optional[Iterable[OptimizerLike]] = None) -> LLMEngine:
    """The seed's entry point: an LLMEngine running ``optimizers`` (optimate.optimizers
    instances and QueuePolicy/BatchPolicy subclasses) in place of the baselines. ``engine_args``
    is EngineArgs, or a dict of them whose ``scheduler`` key holds an optimizer (the seed's
    ``{"scheduler": PriorityScheduler(), ...}``)."""
    return LLMEngine(engine_args, optimizers or ())
