"""The policies' views (optimate._core.SchedulerView, MetricsView) filled from vLLM's scheduler:
its waiting and running requests, its KV block pool and its limits.

Priorities reach the policies and the optimate:* series in Optimate's order (larger is more
important): vLLM's clients send lower-first values, which ``ViewBuilder.priority`` converts, the
one place the plugin does (the priority optimizer's default levels follow the clients'
convention, as with ``optimate serve --priority-order lower-first``).
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable

from optimate import _core
from vllm.v1.request import Request, RequestStatus

#: How vLLM's clients' priorities point: a smaller value runs first.
PRIORITY_ORDER = "lower-first"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class ViewBuilder:
    """Turns vLLM's requests into view rows. Each request gets a sequence id at its first
    sight (unique, increasing: the predictive optimizer counts arrivals by them) and keeps the
    time it was last admitted."""

    def __init__(self, block_size: int, lookahead_tokens: int, clock_ns: Callable[[], int]):
        self._engine_priority = functools.partial(_core.engine_priority, PRIORITY_ORDER)
        self.block_size = block_size
        self.lookahead_tokens = lookahead_tokens
        self.clock_ns = clock_ns
        self._seq_ids: dict[str, int] = {}
        self._next_seq_id = 0
        self.admitted_ns: dict[str, int] = {}
        # A waiting request's row changes only when it is admitted or preempted (invalidate()):
        # the cache converts each row once, not every step, however long the queue.
        self._waiting_rows = _core.RequestRowCache()
        self._fixed: dict[str, tuple] = {}
        self._view = _core.SchedulerView()

    def seq_id(self, request_id: str) -> int:
        seq = self._seq_ids.get(request_id)
        if seq is None:
            seq = self._seq_ids[request_id] = self._next_seq_id
            self._next_seq_id += 1
        return seq

    def forget(self, request_id: str) -> None:
        self._seq_ids.pop(request_id, None)
        self.admitted_ns.pop(request_id, None)
        self._fixed.pop(request_id, None)
        self.invalidate(request_id)

    def invalidate(self, request_id: str) -> None:
        self._waiting_rows.drop(request_id)

    def priority(self, request: Request) -> int:
        """The request's priority in the engine's order (larger is more important)."""
        return self._engine_priority(request.priority)

    def num_blocks(self, request: Request) -> int:
        """Blocks a running request holds: its computed tokens and the lookahead slots vLLM
        allocates with them (full attention; a prefix block it shares counts for each holder)."""
        if request.status != RequestStatus.RUNNING or request.num_computed_tokens == 0:
            return 0
        return cdiv(request.num_computed_tokens + self.lookahead_tokens, self.block_size)

    def row(self, request: Request, scheduled: bool = False) -> tuple:
        rid = request.request_id
        fixed = self._fixed.get(rid)
        if fixed is None:  # what does not change while the request lives
            fixed = self._fixed[rid] = (rid, self.seq_id(rid), 0, self.priority(request),
                                        int(request.arrival_time * 1e9), request.num_prompt_tokens)
        blocks = self.num_blocks(request)
        return fixed + (request.num_output_tokens, request.num_computed_tokens, request.max_tokens, blocks, blocks,
                        request.num_preemptions, 0, self.admitted_ns.get(rid, -1), scheduled)

    def scheduler_view(self, waiting: Iterable[Request], running: Iterable[Request], *, num_blocks: int,
                       num_free_blocks: int, max_num_seqs: int, max_num_batched_tokens: int,
                       token_budget_left: int, prefix_caching: bool, last_step_ns: int,
                       mean_step_ns: float, admits_whole_prompt: bool = False) -> _core.SchedulerView:
        view = self._view  # one view, refilled for each decision
        self._waiting_rows.fill_waiting(view, waiting if isinstance(waiting, list) else list(waiting), self.row)
        view.set_running([self.row(r) for r in running])
        view.now_ns = self.clock_ns()
        kv = _core.KvView()
        kv.num_blocks = num_blocks
        kv.num_free_blocks = num_free_blocks
        kv.block_size = self.block_size
        kv.default_precision = _core.KvPrecision.BF16
        kv.used = 1.0 - num_free_blocks / num_blocks if num_blocks > 0 else 0.0
        kv.prefix_caching = prefix_caching
        kv.admits_whole_prompt = admits_whole_prompt  # vLLM's watermark is out of num_free_blocks already
        view.kv = kv
        view.max_num_seqs = max_num_seqs
        view.max_num_batched_tokens = max_num_batched_tokens
        view.token_budget_left = token_budget_left
        view.last_step_ns = last_step_ns
        view.mean_step_ns = mean_step_ns
        return view


def metrics_view(now_ns: int, waiting: list, running: list, builder: ViewBuilder, *, kv_usage: float,
                 num_kv_blocks: int, counts: dict, long_min_tokens: int) -> _core.MetricsView:
    """The controller's MetricsView (the host adds its window)."""
    m = _core.MetricsView()
    m.now_ns = now_ns
    m.num_running = len(running)
    m.num_waiting = len(waiting)
    m.kv_usage = kv_usage
    m.num_steps = counts["steps"]
    m.num_preemptions = counts["preemptions"]
    m.num_generated_tokens = counts["generated_tokens"]
    m.num_prompt_tokens = counts["prompt_tokens"]
    m.last_step_num_tokens = counts["last_step_tokens"]
    m.num_kv_blocks = num_kv_blocks
    classes: dict[int, _core.ClassMetrics] = {}

    def cls(priority: int) -> _core.ClassMetrics:
        c = classes.get(priority)
        if c is None:
            c = classes[priority] = _core.ClassMetrics()
            c.priority = priority
        return c

    for r in running:
        c = cls(builder.priority(r))
        c.num_running += 1
        blocks = builder.num_blocks(r)
        c.kv_blocks += blocks
        if r.max_tokens >= long_min_tokens:
            c.long_kv_blocks += blocks
    oldest_ns = now_ns
    for r in waiting:
        cls(builder.priority(r)).num_waiting += 1
        oldest_ns = min(oldest_ns, int(r.arrival_time * 1e9))
    m.oldest_waiting_ms = (now_ns - oldest_ns) * 1e-6
    m.classes = [classes[p] for p in sorted(classes, reverse=True)]
    return m
