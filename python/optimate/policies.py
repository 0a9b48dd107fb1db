"""Scheduling policies written in Python.

Subclass QueuePolicy (which waiting requests to admit, in what order; whom to preempt) or
BatchPolicy (admit now, or wait for a fuller batch), then pass an instance in
``create_optimized_engine(args, optimizers=[...])`` (or ``LLM(..., optimizers=[...])``): the
engine registers it under ``name`` and the C++ scheduler calls it between steps, each call with
a fresh SchedulerView: the C++ policies' own view (every field they read), copied so the policy
may keep it. Disable or re-enable it with ``engine.set_optimizer(name, enabled=...)``.

A policy is guarded as the C++ ones are: if a method raises or returns something invalid, that
call gets the baseline's decision (arrival order, admit now, no preemption), the step completes,
and the engine disables the policy (the baseline runs its slot from then on, as
``get_optimizers()`` shows under ``fallback``); ``step()`` reports it with a
PolicyFallbackWarning carrying the Python traceback. Async engines print it through
``sys.unraisablehook``. ``set_optimizer(name, enabled=True)`` turns the policy back on.

Each call costs a GIL acquisition and a copy of the queues into Python objects: see
docs/python.md for measured figures.
"""

from __future__ import annotations

from typing import Optional, Union

from optimate._core import (BatchDecision, ClassMetrics, KvPrecision, KvQuota, KvView, MetricsView,
                           PolicyKnobs, RequestView, SchedulerView, WindowMetrics)


class _PythonPolicy:
    #: The name the engine registers the policy under (default: the class name).
    name: str = ""

    def policy_name(self) -> str:
        return self.name or type(self).__name__

    def counters(self) -> dict[str, float]:
        """The policy's own counters, reported by ``engine.get_optimizers()``."""
        return {}


class QueuePolicy(_PythonPolicy):
    """Chooses the order in which waiting requests are admitted."""

    kind = "queue"

    def order_waiting(self, view: SchedulerView) -> list[int]:
        """Indices into ``view.waiting`` in admission order; requests left out wait this step."""
        raise NotImplementedError

    def preempt_for(self, view: SchedulerView, waiting_index: int, blocked_on: str) -> Optional[int]:
        """``view.waiting[waiting_index]`` does not fit (``blocked_on`` is "max_num_seqs" or
        "kv_blocks"): an index into ``view.running`` to preempt for it, or None (the default)."""
        return None


class BatchPolicy(_PythonPolicy):
    """Decides whether waiting requests start this step."""

    kind = "batch"

    def decide(self, view: SchedulerView) -> Union[bool, BatchDecision]:
        """True to admit now; False (or ``BatchDecision(False, retry_at_ns)``) to run only what
        is already running this step."""
        raise NotImplementedError


__all__ = ["QueuePolicy", "BatchPolicy", "BatchDecision", "SchedulerView", "RequestView", "KvView", "KvQuota",
           "KvPrecision", "PolicyKnobs", "MetricsView", "ClassMetrics", "WindowMetrics"]
