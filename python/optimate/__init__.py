"""Optimate: an LLM serving engine with pluggable optimizers, in-process from Python.

The API follows vLLM's (EngineArgs, SamplingParams, LLMEngine, LLM, AsyncLLMEngine,
RequestOutput) and the seed's integration example (optimate.optimizers,
create_optimized_engine). The engine itself is C++ (optimate._core); see docs/python.md.
"""

from optimate.errors import EngineError, PolicyFallbackWarning
from optimate.engine_args import EngineArgs
from optimate.sampling_params import RequestOutputKind, SamplingParams
from optimate.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from optimate.policies import BatchDecision, BatchPolicy, QueuePolicy, RequestView, SchedulerView
from optimate.engine import LLMEngine, create_optimized_engine
from optimate.llm import LLM
from optimate.async_engine import AsyncLLMEngine
from optimate import optimizers
from optimate._core import set_log_level

__version__ = "0.1.0"

__all__ = [
    "AsyncLLMEngine", "BatchDecision", "BatchPolicy", "CompletionOutput", "EngineArgs", "EngineError",
    "LLM", "LLMEngine", "Logprob", "PolicyFallbackWarning", "QueuePolicy", "RequestMetrics", "RequestOutput", "RequestOutputKind",
    "RequestView", "SamplingParams", "SchedulerView", "create_optimized_engine", "optimizers",
    "set_log_level",
]
