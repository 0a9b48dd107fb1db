"""What the optimizers and the optimate:* series learn from vLLM's steps: arrivals, the first
admission of each request (its queue time), tokens out, finishes, step times and batch sizes.
"""

from __future__ import annotations

from collections import Counter


class StepStats:
    def __init__(self, host, views, step_time_alpha: float = 0.2):
        self.host = host
        self.views = views
        self.alpha = step_time_alpha
        self.counts = {"steps": 0, "preemptions": 0, "generated_tokens": 0, "prompt_tokens": 0,
                       "last_step_tokens": 0}
        self.last_step_ns = 0
        self.mean_step_ns = 0.0
        self._requests: dict[str, list] = {}  # id -> [priority (engine order), arrival_ns, first admitted ns or -1]
        self._planned: dict[int, tuple] = {}  # id(scheduler output) -> (when planned, prompt tokens)
        self._last_update_ns = 0

    def on_arrival(self, request, now_ns: int) -> None:
        arrival_ns = int(request.arrival_time * 1e9)
        self._requests[request.request_id] = [self.views.priority(request), arrival_ns, -1]
        self.views.seq_id(request.request_id)
        self.host.on_arrival(request.request_id, arrival_ns, now_ns)

    def on_preempted(self, request) -> None:
        self.views.admitted_ns.pop(request.request_id, None)
        self.views.invalidate(request.request_id)

    def on_schedule(self, output, requests: dict, now_ns: int) -> None:
        for rid in output.preempted_req_ids or ():
            self.views.admitted_ns.pop(rid, None)
            self.views.invalidate(rid)
        self.counts["preemptions"] += len(output.preempted_req_ids or ())
        prompt_tokens = 0
        for rid, num in output.num_scheduled_tokens.items():
            if rid not in self.views.admitted_ns:
                self.views.admitted_ns[rid] = now_ns
                self.views.invalidate(rid)
            info = self._requests.get(rid)
            if info is not None and info[2] < 0:
                info[2] = now_ns
            r = requests.get(rid)
            if r is not None and r.num_computed_tokens < r.num_prompt_tokens:
                prompt_tokens += min(num, r.num_prompt_tokens - r.num_computed_tokens)
        if output.total_num_scheduled_tokens > 0:
            self._planned[id(output)] = (now_ns, prompt_tokens)
            self.counts["steps"] += 1
            self.counts["prompt_tokens"] += prompt_tokens
            self.counts["last_step_tokens"] = output.total_num_scheduled_tokens
            self.host.record_step(len(output.num_scheduled_tokens))

    def on_update(self, scheduler_output, outputs: dict, now_ns: int) -> None:
        planned = self._planned.pop(id(scheduler_output), None)
        generated = 0
        for eco in outputs.values():
            for o in eco.outputs:
                n = len(o.new_token_ids)
                generated += n
                finished = o.finish_reason is not None
                self.host.on_output(o.request_id, n, finished, now_ns)
                if finished:
                    self._finish(o.request_id)
        self.counts["generated_tokens"] += generated
        if planned is None:
            return
        planned_ns, prompt_tokens = planned
        # With asynchronous scheduling the next step is planned before this one's output
        # arrives: a step's time is from the later of its plan and the previous output.
        step_ns = max(now_ns - max(planned_ns, self._last_update_ns), 0)
        self._last_update_ns = now_ns
        self.last_step_ns = step_ns
        self.mean_step_ns = step_ns if self.mean_step_ns == 0 else (
            self.alpha * step_ns + (1 - self.alpha) * self.mean_step_ns)
        self.host.on_step(now_ns, step_ns, prompt_tokens, generated)

    def on_finished(self, request_id: str, now_ns: int) -> None:
        """A request that vLLM ended outside a step (an abort)."""
        if request_id in self._requests:
            self.host.on_output(request_id, 0, True, now_ns)
            self._finish(request_id)
        else:  # its output already said finished (a chunk of streamed input), yet it waited again
            self.views.forget(request_id)

    def _finish(self, request_id: str) -> None:
        info = self._requests.pop(request_id, None)
        if info is not None and info[2] >= 0:
            self.host.record_queue_time(info[0], (info[2] - info[1]) * 1e-9)
        self.views.forget(request_id)

    def publish_queue_state(self, waiting, skipped_waiting, kv_cache_manager) -> None:
        by_priority = Counter(self.views.priority(r) for r in waiting)
        by_priority.update(self.views.priority(r) for r in skipped_waiting)
        pool = kv_cache_manager.block_pool
        total = pool.num_gpu_blocks - 1
        self.host.set_queue_state(dict(by_priority), total - pool.get_num_free_blocks(), total)
