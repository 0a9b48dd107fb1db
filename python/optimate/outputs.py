"""RequestOutput and CompletionOutput, shaped as vLLM's, and the bookkeeping that builds them
from the engine's per-step deltas."""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Union

from optimate.sampling_params import RequestOutputKind, SamplingParams


@dataclasses.dataclass
class Logprob:
    """Log-probability of one token at one position; ``rank`` 1 is the most likely.
    ``decoded_token`` is left None (the engine does not decode alternatives)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# One dict per generated token: token id -> Logprob (the sampled token and the top alternatives).
SampleLogprobs = list[dict[int, Logprob]]


@dataclasses.dataclass
class CompletionOutput:
    """One of a request's n samples."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None  # "stop", "length" or "abort"; None while running
    stop_reason: Union[int, str, None] = None  # the stop token id or stop string that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class RequestMetrics:
    """Times (``time.time()`` seconds) of one request's life, as vLLM reports them."""

    arrival_time: float
    last_token_time: Optional[float] = None
    first_token_time: Optional[float] = None
    time_in_queue: Optional[float] = None  # from arrival to first admission, engine clock
    finished_time: Optional[float] = None


@dataclasses.dataclass
class RequestOutput:
    """A request's outputs after a step."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    prompt_logprobs: None = None


@dataclasses.dataclass
class _Sequence:
    text: str = ""
    token_ids: list = dataclasses.field(default_factory=list)
    logprobs: Optional[list] = None
    cumulative_logprob: Optional[float] = None
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    text_sent: int = 0
    tokens_sent: int = 0


class _Request:
    def __init__(self, request_id, prompt, prompt_token_ids, params: SamplingParams, arrival_time):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.kind = params.output_kind
        with_logprobs = params.logprobs is not None
        self.seqs = [_Sequence(logprobs=[] if with_logprobs else None,
                               cumulative_logprob=0.0 if with_logprobs else None) for _ in range(params.n)]
        self.metrics = RequestMetrics(arrival_time=arrival_time)
        self.num_cached_tokens = 0
        self.num_unfinished = params.n

    def apply(self, delta, now: float) -> None:
        seq = self.seqs[delta.index]
        if delta.new_token_ids:
            seq.token_ids.extend(delta.new_token_ids)
            if self.metrics.first_token_time is None:
                self.metrics.first_token_time = now
            self.metrics.last_token_time = now
        seq.text += delta.text
        if seq.logprobs is not None:
            for entry in delta.logprobs:
                sampled = entry.sampled
                probs = {t.token_id: Logprob(t.logprob, t.rank) for t in entry.top}
                probs[sampled.token_id] = Logprob(sampled.logprob, sampled.rank)
                seq.logprobs.append(probs)
                seq.cumulative_logprob += sampled.logprob
        if delta.queue_ns >= 0 and self.metrics.time_in_queue is None:
            self.metrics.time_in_queue = delta.queue_ns * 1e-9
        self.num_cached_tokens = max(self.num_cached_tokens, delta.num_cached_tokens)
        if delta.finished and seq.finish_reason is None:
            seq.finish_reason = delta.finish_reason
            seq.stop_reason = delta.stop_reason
            self.num_unfinished -= 1
            if self.num_unfinished == 0:
                self.metrics.finished_time = now

    def output(self, changed: set[int]) -> Optional[RequestOutput]:
        finished = self.num_unfinished == 0
        if self.kind == RequestOutputKind.FINAL_ONLY and not finished:
            return None
        completions = []
        for i, seq in enumerate(self.seqs):
            if self.kind == RequestOutputKind.DELTA:
                if i not in changed:
                    continue
                completions.append(CompletionOutput(
                    i, seq.text[seq.text_sent:], seq.token_ids[seq.tokens_sent:], seq.cumulative_logprob,
                    None if seq.logprobs is None else seq.logprobs[seq.tokens_sent:],
                    seq.finish_reason, seq.stop_reason))
                seq.text_sent, seq.tokens_sent = len(seq.text), len(seq.token_ids)
            else:
                completions.append(CompletionOutput(
                    i, seq.text, list(seq.token_ids), seq.cumulative_logprob,
                    None if seq.logprobs is None else list(seq.logprobs), seq.finish_reason, seq.stop_reason))
        return RequestOutput(self.request_id, self.prompt, self.prompt_token_ids, completions, finished,
                             dataclasses.replace(self.metrics), self.num_cached_tokens)


class OutputTracker:
    """Accumulates the engine's per-sequence deltas into per-request outputs."""

    def __init__(self) -> None:
        self._requests: dict[str, _Request] = {}

    def add(self, request_id: str, prompt: Optional[str], prompt_token_ids: list[int],
            params: SamplingParams, arrival_time: Optional[float] = None) -> None:
        self._requests[request_id] = _Request(request_id, prompt, prompt_token_ids, params,
                                              time.time() if arrival_time is None else arrival_time)

    def remove(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)

    def process(self, deltas) -> list[RequestOutput]:
        """The outputs of the requests these deltas touched, in order of first appearance."""
        now = time.time()
        touched: dict[str, set[int]] = {}
        for delta in deltas:
            request = self._requests.get(delta.request_id)
            if request is None:
                continue
            request.apply(delta, now)
            touched.setdefault(delta.request_id, set()).add(delta.index)
        outputs = []
        for request_id, changed in touched.items():
            request = self._requests[request_id]
            out = request.output(changed)
            if out is not None:
                outputs.append(out)
            if request.num_unfinished == 0:
                del self._requests[request_id]
        return outputs
