"""LLM: offline batches (vLLM's LLM class). Every prompt is queued at once and the engine runs
them with continuous batching; results come back in prompt order."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from optimate.engine import LLMEngine, OptimizerLike, PromptType, _prompt
from optimate.engine_args import EngineArgs
from optimate.outputs import RequestOutput
from optimate.sampling_params import RequestOutputKind, SamplingParams

ChatMessage = Mapping[str, str]  # {"role": ..., "content": ...}

# The progress bar appears only once a batch has run this long (seconds).
_PROGRESS_DELAY_S = 2.0


def _content_text(message: ChatMessage) -> str:
    """A message's text as the server reads it (and vLLM's LLM.chat): a string, a list of text
    parts joined by newlines, or nothing (None or absent: empty, as an assistant message that
    only called tools)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"only text content parts are supported, got {part!r}")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError(f"a message's content must be a string or a list of parts, got {type(content).__name__}")


class LLM:
    """An engine for offline batches: ``LLM(model=..., **engine_args, optimizers=[...])``."""

    def __init__(self, model: str, *, optimizers: Optional[Iterable[OptimizerLike]] = None, **engine_args: Any):
        self.llm_engine = LLMEngine(EngineArgs(model=model, **engine_args), optimizers or ())
        self._ids = itertools.count()
        # Batches from several threads run one after another (the engine is stepped by one).
        self._lock = threading.Lock()

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, *,
                 priority: Union[None, int, Sequence[int]] = None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Completes every prompt; one RequestOutput per prompt, in order. ``sampling_params``
        and ``priority`` are one for all or one per prompt (a larger priority first, unless
        ``priority_order="lower-first"``). A progress bar (tqdm) shows once a batch has run for a
        couple of seconds."""
        if isinstance(prompts, (str, Mapping)) or (
                isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        elif not isinstance(prompts, Iterable):
            raise ValueError("prompts must be a prompt (text, token ids, or a {\"prompt\": ...} dict) or a "
                             f"list of them, got {type(prompts).__name__}")
        return self._run([_prompt(self.llm_engine._core, p) for p in prompts], sampling_params, priority, use_tqdm)

    def chat(self, messages: Union[Sequence[ChatMessage], Sequence[Sequence[ChatMessage]]],
             sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, *,
             add_generation_prompt: bool = True, priority: Union[None, int, Sequence[int]] = None,
             use_tqdm: bool = True) -> list[RequestOutput]:
        """Completes one conversation (a list of {"role", "content"} dicts) or several, rendered
        with the model's chat template."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ValueError("messages must be a list of {\"role\", \"content\"} dicts, or a list of such lists, "
                             f"got {type(messages).__name__}")
        conversations = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        prompts = []
        for conversation in conversations:
            if isinstance(conversation, (str, bytes)) or not isinstance(conversation, Sequence) or \
                    not all(isinstance(m, Mapping) for m in conversation):
                raise ValueError(f"a conversation must be a list of {{\"role\", \"content\"}} dicts, got {conversation!r:.200}")
            for m in conversation:
                if not isinstance(m.get("role"), str):
                    raise ValueError(f"a message's role must be a string, got {m.get('role')!r:.100}")
            pairs = [(m["role"], _content_text(m)) for m in conversation]
            text, ids = self.llm_engine._core.chat_prompt(pairs, add_generation_prompt)
            prompts.append((text, ids))
        return self._run(prompts, sampling_params, priority, use_tqdm)

    def _run(self, prompts: list[tuple[Optional[str], list[int]]], sampling_params, priority,
             use_tqdm: bool) -> list[RequestOutput]:
        with self._lock:
            return self._run_batch(prompts, sampling_params, priority, use_tqdm)

    def _run_batch(self, prompts: list[tuple[Optional[str], list[int]]], sampling_params, priority,
                   use_tqdm: bool) -> list[RequestOutput]:
        n = len(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params or SamplingParams()] * n
        else:
            if not isinstance(sampling_params, Sequence) or isinstance(sampling_params, (str, bytes)):
                raise ValueError("sampling_params must be a SamplingParams or a list of them, got "
                                 f"{type(sampling_params).__name__}")
            params_list = list(sampling_params)
            if len(params_list) != n:
                raise ValueError(f"{len(params_list)} sampling_params for {n} prompts")
            for p in params_list:
                if not isinstance(p, SamplingParams):
                    raise ValueError(f"sampling_params must be SamplingParams, got {type(p).__name__}")
        if priority is None or (isinstance(priority, int) and not isinstance(priority, bool)):
            priority = [priority] * n
        elif isinstance(priority, Sequence) and not isinstance(priority, (str, bytes)):
            if len(priority) != n:
                raise ValueError(f"{len(priority)} priorities for {n} prompts")
        else:
            raise ValueError(f"priority must be an int or a list of ints, one per prompt, got {type(priority).__name__}")
        engine = self.llm_engine
        order: dict[str, int] = {}
        try:
            for i, ((text, ids), params) in enumerate(zip(prompts, params_list)):
                request_id = str(next(self._ids))
                params = dataclasses.replace(params, output_kind=RequestOutputKind.FINAL_ONLY)
                engine.add_request(request_id, {"prompt": text, "prompt_token_ids": ids}, params,
                                   priority=priority[i])
                order[request_id] = i
            results: list[Optional[RequestOutput]] = [None] * n
            bar = _progress(n) if use_tqdm else None
            while engine.has_unfinished_requests() and any(r is None for r in results):
                for out in engine.step():
                    if out.finished and out.request_id in order:
                        results[order[out.request_id]] = out
                        if bar is not None:
                            bar.update(1)
            if bar is not None:
                bar.close()
        except BaseException:
            engine.abort_request(list(order))
            while engine.has_unfinished_requests():
                engine.step()
            raise
        return results  # type: ignore[return-value]


def _progress(total: int):
    from tqdm.auto import tqdm  # imported here: building the package needs no tqdm

    return tqdm(total=total, desc="Processed prompts", unit="req", delay=_PROGRESS_DELAY_S, dynamic_ncols=True)
