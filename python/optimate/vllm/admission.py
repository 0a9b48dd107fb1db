"""Before each vLLM step: which waiting requests the step may admit, in what order, and which
running requests give way to them.

The policies decide on a view of vLLM's queues; vLLM's own scheduling loop then admits from its
waiting queue, which for the step holds the head of the policy's order: as many requests as
vLLM could admit (vLLM admits from the front and stops at the first that does not fit, as
Optimate's scheduler does). The full queue stays as it was and is given back after the step.

Priority preemption of a running request for a blocked waiting one happens here, through vLLM's
own preemption (``_preempt_request``), before vLLM's loop runs: Optimate's scheduler asks when
the head of its order cannot be admitted (no sequence slot, or too few free KV blocks), and so
does this, with vLLM's counts. The KV estimate takes a waiting request's whole prompt (vLLM
reserves it before admitting, ``scheduler_reserve_full_isl``), or its first chunk when vLLM does
not, without prefix-cache hits: an upper bound, so a request whose prefix is cached may cause a
preemption it did not need.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from vllm.v1.request import Request

from optimate.vllm.views import cdiv as _cdiv


@dataclasses.dataclass
class Capacity:
    """What the step has room for, as vLLM will count it."""

    free_slots: int
    free_blocks: int
    token_budget: int


@dataclasses.dataclass
class AdmissionPlan:
    order: list          # the waiting requests vLLM may admit this step, in order
    victims: list        # running requests preempted for blocked ones
    held: bool = False   # a batch policy held every new request back


def blocks_to_admit(request: Request, budget: int, block_size: int, lookahead: int, full_sequence: bool) -> int:
    tokens = request.num_tokens if full_sequence else min(request.num_tokens, max(budget, 0))
    return _cdiv(tokens + lookahead, block_size)


def running_growth(running: list, budget: int, block_size: int, lookahead: int,
                   num_blocks: Callable[[Request], int]) -> tuple[int, int]:
    """(blocks, tokens) the running requests take this step: each one's next tokens, within the
    token budget, in the running order vLLM schedules them."""
    blocks = 0
    tokens = 0
    for r in running:
        if tokens >= budget:
            break
        new = max(r.num_tokens_with_spec + r.num_output_placeholders - r.num_computed_tokens, 0)
        new = min(new, budget - tokens)
        tokens += new
        blocks += max(_cdiv(r.num_computed_tokens + new + lookahead, block_size) - num_blocks(r), 0)
    return blocks, tokens


class Admission:
    """One step's admission decisions. ``view`` builds a fresh SchedulerView of the current
    queues (with the given free blocks and budget), ``preempt`` preempts a running request
    through vLLM."""

    def __init__(self, host, view: Callable[[list, int, int], object], preempt: Callable[[Request], int],
                 block_size: int, lookahead: int, full_sequence: bool):
        self.host = host
        self.view = view
        self.preempt = preempt
        self.block_size = block_size
        self.lookahead = lookahead
        self.full_sequence = full_sequence

    def plan(self, waiting: list, running: list, capacity: Capacity, *, batch_policy: bool, queue_policy: bool,
             vllm_order: Callable[[list], list]) -> AdmissionPlan:
        if batch_policy and waiting:
            decision = self.host.decide(self.view(waiting, capacity.free_blocks, capacity.token_budget))
            if not decision.admit_waiting:
                return AdmissionPlan([], [], held=True)
        if not queue_policy:
            return AdmissionPlan(vllm_order(waiting), [])
        if not waiting:
            return AdmissionPlan([], [])
        view = self.view(waiting, capacity.free_blocks, capacity.token_budget)
        indices = self.host.order_waiting(view)
        order = [waiting[i] for i in indices]
        victims = self._preempt_for_blocked(indices, waiting, running, capacity, view)
        return AdmissionPlan(order, victims)

    def _preempt_for_blocked(self, indices: list, waiting: list, running: list, capacity: Capacity, view) -> list:
        """Walks the order (`indices` into `waiting`) as vLLM will admit it; where a request
        does not fit, asks the queue policy for a victim until it fits or the policy declines,
        and stops there (vLLM admits nothing past a request that does not fit). `view` is the
        order's view, still current until something changes."""
        victims = []
        slots, free, budget = capacity.free_slots, capacity.free_blocks, capacity.token_budget
        for index in indices:
            if budget <= 0:
                break
            request = waiting[index]
            need = blocks_to_admit(request, budget, self.block_size, self.lookahead, self.full_sequence)
            while slots <= 0 or need > free:
                blocked_on = "max_num_seqs" if slots <= 0 else "kv_blocks"
                if view is None:
                    view = self.view(waiting, free, budget)
                else:
                    view.kv.num_free_blocks = max(free, 0)
                    view.token_budget_left = max(budget, 0)
                choice = self.host.preempt_for(view, index, blocked_on)
                view = None  # a preemption changes the queues; an answer of None ends the walk
                if choice is None:
                    return victims
                victim = running[choice]
                free += self.preempt(victim)
                slots += 1
                victims.append(victim)
            slots -= 1
            free -= need
            budget -= min(request.num_tokens, budget)
        return victims
