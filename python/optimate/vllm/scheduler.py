"""optimate.vllm.Scheduler: vLLM's v1 scheduler with Optimate's scheduling optimizers.

    vllm serve MODEL --scheduler-cls optimate.vllm.Scheduler

It is vLLM's own scheduler (AsyncScheduler when vLLM schedules asynchronously, the default)
with decisions taken before each step by the same C++ policies ``optimate serve`` runs
(optimate._core.OptimizerHost):

- queue slot (``priority``): which waiting requests the step admits, in what order, and which
  running request gives way to a blocked one (admission.py);
- batch slot (``predictive``): whether new requests start now or wait for a fuller batch;
- preempt slot (``priority``): the victim when the KV pool runs dry (victims.py);
- controller (``adaptive``): max_num_seqs and the token budget (up to what vLLM was started
  with), the per-class KV quota and the batch hold, between steps.

A slot no optimizer fills runs vLLM's own behaviour, as configured (``--scheduling-policy``). The
guard falls back from an optimizer that throws, answers impossibly or is slow (the watchdog), and
if this module's own code fails in a step, every optimizer rolls back and vLLM schedules alone.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.request import RequestStatus

from optimate import _core
from optimate.vllm.admission import Admission, Capacity, running_growth
from optimate.vllm.config import parse_config
from optimate.vllm.stats import StepStats
from optimate.vllm.version import check_vllm_version
from optimate.vllm.victims import RunningList
from optimate.vllm.views import PRIORITY_ORDER, ViewBuilder, metrics_view

logger = logging.getLogger("optimate.vllm")

#: Requests past the free slots in a step's queue: vLLM passes over some without admitting them
#: (a LoRA limit, a status that moves them to its skipped queue) and takes the next.
HEAD_MARGIN = 16


class OptimizersMixin:
    """The optimizers' side of the scheduler; mixed into vLLM's Scheduler and AsyncScheduler."""

    #: The views' clock (ns, the clock of vLLM's request arrival times) and the guard's clock
    #: (ns, None: steady). Tests replace them with fake clocks.
    clock_ns: Callable[[], int] = staticmethod(time.time_ns)
    guard_clock_ns: Optional[Callable[[], int]] = None

    def __init__(self, vllm_config, *args, **kwargs):
        check_vllm_version()
        super().__init__(vllm_config, *args, **kwargs)
        extra = vllm_config.additional_config or {}
        config = parse_config(extra.get("optimate"))
        self.optimate_host = _core.OptimizerHost(
            config.optimizers, priority_order=PRIORITY_ORDER, watchdog_ms=config.watchdog_ms,
            model_name=vllm_config.model_config.served_model_name or vllm_config.model_config.model,
            max_model_len=self.max_model_len, clock=self.guard_clock_ns)
        self._optimate_vllm_policy = self.policy
        self._optimate_configured = (self.max_num_running_reqs, self.max_num_scheduled_tokens)
        self._optimate_views = ViewBuilder(self.block_size, self.num_lookahead_tokens, self.clock_ns)
        self._optimate_admission = Admission(self.optimate_host, self._optimate_view_of, self._optimate_preempt_for_admission, self.block_size,
                                    self.num_lookahead_tokens, self.scheduler_reserve_full_isl)
        self.optimate_stats = StepStats(self.optimate_host, self._optimate_views)
        self._optimate_next_tick_ns = 0
        self._optimate_failed = False
        self._optimate_step_waiting = None  # the queue as it was before the step, while it runs
        logger.info("optimate: optimizers %s (from %s)",
                    ", ".join(n + ("" if on else " (disabled)") for n, _, on in config.optimizers) or "none",
                    config.source)

    # --- what vLLM calls ------------------------------------------------------------------
    def add_request(self, request) -> None:
        super().add_request(request)
        self.optimate_stats.on_arrival(request, self.clock_ns())

    def finish_requests(self, request_ids, finished_status):
        # None: vLLM ends every request it holds.
        ids = [request_ids] if isinstance(request_ids, str) else (
            list(self.requests) if request_ids is None else list(request_ids))
        out = super().finish_requests(ids if request_ids is not None else request_ids, finished_status)
        for rid in ids:
            self.optimate_stats.on_finished(rid, self.clock_ns())
        return out

    def schedule(self, *args, **kwargs):
        now = self.clock_ns()
        plan = None
        try:
            self._optimate_between_steps(now)
            plan = self._optimate_prepare(now) if self._optimate_optimizing() else None
        except Exception as e:  # the plugin's own code failed: vLLM schedules alone from now on
            self._optimate_give_up(e)
            plan = None
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            if plan is not None:
                self._optimate_finish(plan)
        self.optimate_stats.on_schedule(output, self.requests, self.clock_ns())
        return output

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.optimate_stats.on_update(scheduler_output, outputs, self.clock_ns())
        return outputs

    # --- run-time control (the /v1/optimizers endpoints reach these through vLLM's engine core) --
    def optimate_call(self, op: str, arg: Optional[dict] = None):
        host = self.optimate_host
        if op == "list":
            return host.states()
        if op == "rollback":
            host.rollback()
            host.record_event("all", "rollback")
        elif op == "restore":
            host.restore()
            host.record_event("all", "restore")
            self._optimate_failed = False
        elif op == "update":
            name = arg["name"]
            current = next((s for s in host.states() if s["name"] == name and not s["baseline"]), None)
            options = dict(current["options"]) if current else {}
            options.update(arg.get("options") or {})
            enabled = arg.get("enabled", True if current is None else current["enabled"] or "enabled" in arg)
            from optimate.vllm.config import check_optimizers
            check_optimizers([(name, options, enabled)])
            host.set_optimizer(name, options, bool(enabled))
            host.record_event(name, "update")
        elif op == "metrics":
            self.optimate_stats.publish_queue_state(self.waiting, self.skipped_waiting, self.kv_cache_manager)
            return host.metrics_text()
        else:
            raise ValueError(f"unknown optimizer operation '{op}'")
        self._optimate_apply_slots()
        return host.states()

    # --- the step ---------------------------------------------------------------------------
    def _optimate_optimizing(self) -> bool:
        host = self.optimate_host
        return not self._optimate_failed and any(host.owner(s) for s in ("queue", "batch", "preempt"))

    def _optimate_between_steps(self, now: int) -> None:
        for name, reason, detail in self.optimate_host.take_faults(now):
            self.optimate_host.record_event(name, "fallback")
        interval = self.optimate_host.controller_interval_ms
        if interval is None:
            self._optimate_reset_limits()
        elif now >= self._optimate_next_tick_ns and not self._optimate_failed:
            self._optimate_next_tick_ns = now + int(interval * 1e6)
            self._optimate_tick(now)
        self._optimate_apply_slots()

    def _optimate_tick(self, now: int) -> None:
        waiting = list(self.waiting)
        m = metrics_view(now, waiting, self.running, self._optimate_views, kv_usage=self.kv_cache_manager.usage,
                         num_kv_blocks=self._optimate_num_blocks(), counts=self.optimate_stats.counts,
                         long_min_tokens=self.optimate_host.policy_knobs.kv_quota.long_min_tokens)
        seqs, tokens = self._optimate_configured
        changes = self.optimate_host.tick(m, self.max_num_running_reqs, self.max_num_scheduled_tokens, seqs, tokens,
                                          self._optimate_num_blocks())
        if changes["max_num_seqs"] is not None:
            self.max_num_running_reqs = min(max(changes["max_num_seqs"], 1), seqs)
        if changes["max_num_batched_tokens"] is not None:
            self.max_num_scheduled_tokens = min(max(changes["max_num_batched_tokens"], 1), tokens)

    def _optimate_reset_limits(self) -> None:
        self.max_num_running_reqs, self.max_num_scheduled_tokens = self._optimate_configured

    def _optimate_apply_slots(self) -> None:
        """vLLM's queues as the slots need them: a queue or victim optimizer works on vLLM's
        first-come-first-served mechanism (a list it may reorder, the newest-first victim it
        may replace); with neither, vLLM's configured policy and its queues come back."""
        host = self.optimate_host
        ours = not self._optimate_failed and bool(host.owner("queue") or host.owner("preempt"))
        policy = SchedulingPolicy.FCFS if ours else self._optimate_vllm_policy
        if policy != self.policy:
            waiting, skipped = self._optimate_vllm_order(list(self.waiting)), list(self.skipped_waiting)
            self.policy = policy
            self.waiting = create_request_queue(policy)
            self.skipped_waiting = create_request_queue(policy)
            for r in waiting:
                self.waiting.add_request(r)
            for r in skipped:
                self.skipped_waiting.add_request(r)

    def _optimate_vllm_order(self, waiting: list) -> list:
        return sorted(waiting) if self._optimate_vllm_policy == SchedulingPolicy.PRIORITY else waiting

    def _optimate_prepare(self, now: int):
        host = self.optimate_host
        queue = self.waiting
        waiting = list(queue)
        budget = self.max_num_scheduled_tokens
        growth_blocks, growth_tokens = running_growth(self.running, budget, self.block_size,
                                                      self.num_lookahead_tokens, self._optimate_views.num_blocks)
        capacity = Capacity(
            free_slots=self.max_num_running_reqs - len(self.running) - self.num_waiting_for_streaming_input,
            free_blocks=self._optimate_free_blocks() - growth_blocks,
            token_budget=budget - growth_tokens)
        plan = self._optimate_admission.plan(waiting, self.running, capacity, batch_policy=bool(host.owner("batch")),
                                    queue_policy=bool(host.owner("queue")), vllm_order=self._optimate_vllm_order)
        self._optimate_step_waiting = waiting
        if host.owner("preempt"):
            self.running = RunningList(self.running, self._optimate_choose_victim)
        # vLLM's loop admits from a queue of this step's own: the head of the order, as many as
        # it has slots for and a margin for the ones it passes over (with no slot free, the
        # margin alone: vLLM stops before taking any, and reads the queue as not empty). The
        # full queue waits aside, unchanged (the victims above are already back in it), and
        # comes back after the step. Only RequestQueue's own methods: with no queue or victim
        # optimizer, vLLM's configured queue is its priority heap.
        room = max(self.max_num_running_reqs - len(self.running), 0)
        plan.head = plan.order[:room + HEAD_MARGIN]
        plan.queue = queue
        step_queue = create_request_queue(self.policy)
        for r in plan.head:
            step_queue.add_request(r)
        self.waiting = step_queue
        return plan

    def _optimate_finish(self, plan) -> None:
        """Puts the waiting queue back: requests preempted in this step first (vLLM's own place
        for them), then the rest in the order they had, less those the step took."""
        self._optimate_step_waiting = None
        if isinstance(self.running, RunningList):
            self.running = list(self.running)
        step_queue, queue = self.waiting, plan.queue
        self.waiting = queue
        in_head = set(map(id, plan.head))
        in_step = set(map(id, step_queue))
        preempted = [r for r in step_queue if id(r) not in in_head]  # (the plan's victims are in `queue`)
        taken = [r for r in plan.head if id(r) not in in_step]  # admitted, or moved to vLLM's skipped queue
        if taken:
            queue.remove_requests(taken)
        for r in reversed(preempted):
            queue.prepend_request(r)

    def _optimate_choose_victim(self, running: list, candidates: list) -> int:
        # Asked during vLLM's step: the waiting requests as they were before it.
        waiting = self._optimate_step_waiting
        view = self._optimate_view_of(waiting if waiting is not None else list(self.waiting),
                                      self._optimate_free_blocks(), 0, running=running)
        return self.optimate_host.choose_victim(view, candidates)

    def _optimate_preempt_for_admission(self, victim) -> int:
        """Preempts `victim` through vLLM (its blocks back to the pool, the request to the front
        of the waiting queue) and returns the blocks it held. It waits out this step: the step's
        own queue holds only the order planned before it was preempted."""
        blocks = self._optimate_views.num_blocks(victim)
        self.running.remove(victim)
        self._preempt_request(victim, time.monotonic())
        self.optimate_stats.on_preempted(victim)
        return blocks

    def _optimate_view_of(self, waiting: list, free_blocks: int, budget: int, running: Optional[list] = None):
        stats = self.optimate_stats
        return self._optimate_views.scheduler_view(
            waiting, self.running if running is None else running, num_blocks=self._optimate_num_blocks(),
            num_free_blocks=max(free_blocks, 0), max_num_seqs=self.max_num_running_reqs,
            max_num_batched_tokens=self.max_num_scheduled_tokens, token_budget_left=max(budget, 0),
            prefix_caching=self.cache_config.enable_prefix_caching, last_step_ns=stats.last_step_ns,
            mean_step_ns=stats.mean_step_ns, admits_whole_prompt=bool(self.scheduler_reserve_full_isl))

    def _optimate_num_blocks(self) -> int:
        return self.kv_cache_manager.block_pool.num_gpu_blocks - 1  # one block is vLLM's null block

    def _optimate_free_blocks(self) -> int:
        watermark = int(self.scheduler_config.watermark * self._optimate_num_blocks())
        return self.kv_cache_manager.block_pool.get_num_free_blocks() - watermark

    def _optimate_give_up(self, error: Exception) -> None:
        logger.exception("optimate: the plugin failed (%s); every optimizer rolls back and vLLM schedules "
                         "alone (POST /v1/optimizers/restore to try again)", error)
        self._optimate_failed = True
        self._optimate_step_waiting = None
        try:
            self.optimate_host.rollback()
            self.optimate_host.record_event("all", "rollback")
        finally:
            if isinstance(self.running, RunningList):
                self.running = list(self.running)
            self._optimate_reset_limits()
            self._optimate_apply_slots()


class Scheduler(OptimizersMixin, VllmScheduler):
    """vLLM's scheduler with Optimate's optimizers. Built as AsyncScheduler's subclass when vLLM
    schedules asynchronously, so choosing this class never turns async scheduling off."""

    def __new__(cls, vllm_config, *args, **kwargs):
        if cls is Scheduler and vllm_config.scheduler_config.async_scheduling:
            cls = AsyncOptimizedScheduler
        return super().__new__(cls)


class AsyncOptimizedScheduler(Scheduler, AsyncScheduler):
    pass
