"""SamplingParams with vLLM's names and the engine's defaults and checks."""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional, Union

from optimate import _core

_D = _core.sampling_defaults()


class RequestOutputKind(enum.IntEnum):
    """What each RequestOutput of a running request carries (vLLM's enum)."""

    CUMULATIVE = 0  #: everything generated so far (the default)
    DELTA = 1       #: only what is new since the previous output
    FINAL_ONLY = 2  #: nothing until the request finishes


@dataclasses.dataclass
class SamplingParams:
    """How to sample one request: vLLM's fields, checked on construction (ValueError names the
    field). ``max_tokens=None`` generates until the context is full; ``temperature=0`` is greedy."""

    n: int = _D["n"]
    presence_penalty: float = _D["presence_penalty"]
    frequency_penalty: float = _D["frequency_penalty"]
    repetition_penalty: float = _D["repetition_penalty"]
    temperature: float = _D["temperature"]
    top_p: float = _D["top_p"]
    top_k: int = _D["top_k"]
    min_p: float = _D["min_p"]
    seed: Optional[int] = None
    stop: Union[None, str, list[str]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = _D["ignore_eos"]
    max_tokens: Optional[int] = _D["max_tokens"]
    min_tokens: int = _D["min_tokens"]
    logprobs: Optional[int] = None
    include_stop_str_in_output: bool = _D["include_stop_str_in_output"]
    skip_special_tokens: bool = _D["skip_special_tokens"]
    spaces_between_special_tokens: bool = _D["spaces_between_special_tokens"]
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE

    def __post_init__(self) -> None:
        if self.seed == -1:  # vLLM's spelling of "no seed"
            self.seed = None
        if isinstance(self.n, int) and self.n > 1 and isinstance(self.temperature, (int, float)) \
                and self.temperature < 1e-5:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}")  # as vLLM
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        elif isinstance(self.stop, (list, tuple)) and all(isinstance(s, str) for s in self.stop):
            self.stop = list(self.stop)
        else:
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.output_kind = RequestOutputKind(self.output_kind)
        if self.max_tokens is None:
            _core.check_sampling_params(dataclasses.replace(self, max_tokens=max(1, self.min_tokens)))
        else:
            _core.check_sampling_params(self)

    def clone(self) -> "SamplingParams":
        return dataclasses.replace(self)
