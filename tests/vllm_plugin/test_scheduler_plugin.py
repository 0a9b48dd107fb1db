"""Optimate's optimizers in vLLM's own v1 scheduler (optimate.vllm.Scheduler), against vLLM's
scheduler as it ships (FCFS and --scheduling-policy priority) on the same requests.

Priorities are vLLM's: a smaller value is more important. Every test ends with every request
finished and every KV block back in the pool.
"""

import pytest

from conftest import BLOCK_SIZE, VllmScheduler, request

PRIORITY = {"optimizers": {"priority": {}}}


def test_admission_order_follows_priority_where_vllm_fcfs_does_not(make, driver):
    def run(scheduler):
        d = driver(scheduler)
        d.add(request("low-a", priority=5), request("low-b", priority=5), request("high", priority=0))
        d.run()
        d.assert_all_returned(64)
        return d.admitted

    assert run(make(cls=VllmScheduler, max_num_seqs=1)) == ["low-a", "low-b", "high"]
    assert run(make(cls=VllmScheduler, max_num_seqs=1, policy="priority")) == ["high", "low-a", "low-b"]
    assert run(make(PRIORITY, max_num_seqs=1)) == ["high", "low-a", "low-b"]


def test_a_long_queue_keeps_its_order_and_gives_up_only_whom_vllm_admitted(make, driver):
    """Far more requests wait than vLLM can admit in a step (its step sees the head of the
    policy's order alone): after each step the waiting queue is every request not yet admitted,
    in arrival order, and the admissions follow priority, then arrival, as vLLM's priority
    policy admits them."""

    def run(scheduler, queue_in_arrival_order):
        d = driver(scheduler)
        arrivals = [request(f"low-{i:02d}", priority=5, max_tokens=3) for i in range(30)]
        arrivals += [request(f"high-{i}", priority=0, max_tokens=3) for i in range(3)]
        arrivals += [request(f"low-{i:02d}", priority=5, max_tokens=3) for i in range(30, 60)]
        d.add(*arrivals)
        for _ in range(3):
            d.step()
            if queue_in_arrival_order:  # vLLM's priority queue is a heap
                waiting = [r.request_id for r in scheduler.waiting]
                assert waiting == [r.request_id for r in arrivals if r.request_id not in d.admitted]
        d.run()
        d.assert_all_returned(64)
        assert sorted(d.finished) == sorted(r.request_id for r in arrivals)
        views = getattr(scheduler, "_optimate_views", None)
        if views is not None:  # the plugin keeps no finished request (its rows, its ids)
            assert len(views._waiting_rows) == 0 and not views._seq_ids and not views._fixed
        return d.admitted

    expected = run(make(cls=VllmScheduler, max_num_seqs=2, policy="priority"), False)
    assert expected[:3] == ["high-0", "high-1", "high-2"]
    assert run(make(PRIORITY, max_num_seqs=2), True) == expected


def test_predictive_alone_keeps_vllms_priority_queue(make, driver):
    """With no queue optimizer, vLLM's own `--scheduling-policy priority` orders the queue (its
    heap, not a list): the batch optimizer holds and releases on it, and nothing rolls back."""
    s = make({"optimizers": {"predictive": {"max_wait_ms": 1, "require_gain": False}}}, max_num_seqs=2,
             policy="priority")
    d = driver(s)
    d.add(request("a", priority=1), request("b", priority=0), request("c", priority=2))
    d.run()
    d.assert_all_returned(64)
    assert d.admitted == ["b", "a", "c"]
    assert [x["name"] for x in s.optimate_call("list") if x["enabled"] and not x["baseline"]] == ["predictive"]


def test_a_full_batch_still_reads_as_capacity_bound(make, driver):
    """vLLM's data-parallel prefill balancing reads whether requests were left waiting: with
    every slot taken the plugin's step says so as vLLM's does."""
    def bound(scheduler):
        d = driver(scheduler)
        d.add(*[request(f"r{i}", max_tokens=20) for i in range(6)])
        d.step()
        d.step()  # both slots taken, four waiting
        return scheduler.prefill_capacity_bound

    assert bound(make(cls=VllmScheduler, max_num_seqs=2)) is True
    assert bound(make(PRIORITY, max_num_seqs=2)) is True


def test_the_max_wait_bound_admits_a_starving_request(make, driver, clock):
    """A steady stream of important requests: vLLM's priority policy never admits the
    unimportant one while they keep coming; the priority optimizer admits it once it has waited
    its level's max_wait_ms."""

    def run(scheduler):
        d = driver(scheduler, step_ms=50)
        d.add(request("low", priority=3, max_tokens=2))
        for i in range(40):
            d.add(request(f"high-{i}", priority=0, max_tokens=2))
            d.step()
        d.run()
        d.assert_all_returned(64)
        return d.admitted.index("low")

    config = {"optimizers": {"priority": {"levels": 4, "max_wait_ms": 500, "aging_ms": 0}}}
    assert run(make(cls=VllmScheduler, max_num_seqs=1, policy="priority")) >= 39  # only once the stream ends
    position = run(make(config, max_num_seqs=1))
    assert position < 20  # 500 ms of 50 ms steps, each admitting at most one


def test_priority_preemption_frees_a_sequence_slot_vllm_leaves_taken(make, driver, clock):
    """Every slot held by unimportant long requests: vLLM's priority mode makes the important
    request wait for one to finish (priority inversion); the priority optimizer preempts the
    least important for it."""

    def run(scheduler):
        d = driver(scheduler)
        d.add(request("low-old", priority=4, max_tokens=40), request("low-new", priority=5, max_tokens=40))
        d.step()
        clock.advance_ms(1000)  # past min_run_ms
        d.add(request("high", priority=0, max_tokens=2))
        for _ in range(3):
            d.step()
        admitted_at = len(d.admitted)
        d.run()
        d.assert_all_returned(64)
        return d, admitted_at

    vllm, _ = run(make(cls=VllmScheduler, max_num_seqs=2, policy="priority"))
    assert vllm.preempted == [] and vllm.finished.index("high") == 2
    ours, admitted = run(make(PRIORITY, max_num_seqs=2))
    assert ours.preempted[0] == "low-new"  # the least important
    assert ours.finished[0] == "high"


def test_priority_preemption_for_kv_blocks(make, driver, clock):
    """The pool holds two long prompts; the important request needs one's blocks. It waits
    preempt_after_ms (200 by default) for blocks to free by themselves first; at 0 it preempts
    at once."""
    for options, wait_ms in (({}, 200), ({"preempt_after_ms": 0}, 0)):
        scheduler = make({"optimizers": {"priority": options}}, num_blocks=9, max_num_seqs=4)
        d = driver(scheduler)
        # 4 and 3 blocks, each with room for 8 more tokens: nothing grows out of the pool here.
        d.add(request("low", priority=5, prompt_len=4 * BLOCK_SIZE - 8, max_tokens=20),
              request("mid", priority=1, prompt_len=3 * BLOCK_SIZE - 8, max_tokens=20))
        d.step()
        clock.advance_ms(1000)
        d.add(request("high", priority=0, prompt_len=3 * BLOCK_SIZE, max_tokens=2))
        if wait_ms:
            d.step()
            assert d.preempted == [] and "high" not in d.admitted, options
            clock.advance_ms(wait_ms)
        d.step()
        assert d.preempted == ["low"] and "high" in d.admitted, options
        d.run()
        assert d.finished.index("high") < d.finished.index("low")
        d.assert_all_returned(9)


def test_victim_when_the_pool_runs_dry_is_the_least_important(make, driver, clock):
    """Two running requests outgrow the pool: vLLM (FCFS) preempts the newest, which here is the
    important one; the priority optimizer preempts the unimportant one."""

    def run(scheduler):
        d = driver(scheduler)
        d.add(request("low", priority=5, prompt_len=BLOCK_SIZE, max_tokens=40))
        d.step()
        d.add(request("high", priority=0, prompt_len=BLOCK_SIZE, max_tokens=40))
        d.run()
        d.assert_all_returned(5)
        return d.preempted

    assert run(make(cls=VllmScheduler, num_blocks=5))[0] == "high"
    assert run(make({"optimizers": {"priority": {"preempt": False}}}, num_blocks=5))[0] == "low"


def test_a_slow_optimizer_falls_back_to_vllm_by_itself(make, driver, clock, monkeypatch):
    """Every policy call takes 300 ms on the guard's clock (the watchdog's bound is 250 ms):
    after three in a row the optimizer is disabled and vLLM's own order runs."""
    from optimate.vllm import scheduler as plugin

    ticks = iter(range(0, 10**12, 300_000_000))
    monkeypatch.setattr(plugin.OptimizersMixin, "guard_clock_ns", staticmethod(lambda: next(ticks)))
    scheduler = make(PRIORITY, max_num_seqs=1)
    d = driver(scheduler)
    for i in range(6):
        d.add(request(f"r{i}", priority=5 - i, max_tokens=1))
    d.run()
    d.assert_all_returned(64)
    states = {s["name"]: s for s in scheduler.optimate_call("list")}
    assert states["priority"]["enabled"] is False
    assert states["priority"]["fallback"]["reason"] == "watchdog"
    assert d.admitted[:1] == ["r5"]              # the optimizer's first choice
    assert d.admitted[-3:] == ["r1", "r2", "r3"] or d.admitted[-2:] == ["r2", "r3"]  # then arrival order
    assert "optimate:optimizer_fallbacks_total" in scheduler.optimate_call("metrics")


def test_an_aborted_stream_of_input_leaves_nothing_behind(make, driver):
    """A request whose input comes in chunks (vLLM's resumable requests) ends its first chunk
    with a finished output and waits for the next; aborted there, the plugin keeps nothing of
    it (no row, no id) once every request is finished."""
    from vllm.v1.request import RequestStatus

    def streamed(prompt_len):
        r = request("S", prompt_len=prompt_len, max_tokens=2)
        r.resumable = True
        return r

    s = make(PRIORITY, max_num_seqs=2, num_blocks=64)
    d = driver(s)
    d.add(request("A", max_tokens=40), streamed(16), request("B", max_tokens=40))
    d.step()
    d.add(streamed(8))  # the next chunk, sent while the first runs
    for _ in range(3):
        d.step()
    assert any(r.request_id == "S" for r in s.waiting)  # its first chunk done, it waits again
    s.finish_requests(["S"], RequestStatus.FINISHED_ABORTED)
    d.run()
    views = s._optimate_views
    assert not s.requests and len(views._waiting_rows) == 0 and not views._seq_ids and not views._fixed


def test_when_the_plugin_itself_fails_vllm_schedules_alone(make, driver, monkeypatch):
    scheduler = make(PRIORITY, max_num_seqs=1)

    def broken(*args, **kwargs):
        raise RuntimeError("view builder bug")

    monkeypatch.setattr(scheduler._optimate_views, "scheduler_view", broken)
    d = driver(scheduler)
    d.add(request("a", priority=5), request("b", priority=5), request("c", priority=0))
    d.run()
    d.assert_all_returned(64)
    assert d.admitted == ["a", "b", "c"]  # vLLM's FCFS
    assert all(s["rolled_back"] for s in scheduler.optimate_call("list") if not s["baseline"])


def test_rollback_is_plain_vllm_and_restore_brings_the_optimizers_back(make, driver):
    scheduler = make(PRIORITY, max_num_seqs=1, policy="priority")
    d = driver(scheduler)
    scheduler.optimate_call("rollback")
    assert scheduler.policy.value == "priority"  # vLLM's configured policy and its queues
    d.add(request("a", priority=5, max_tokens=40))
    d.step()
    d.add(request("b", priority=4), request("c", priority=0))
    d.run()
    assert d.admitted == ["a", "c", "b"] and d.preempted == []  # vLLM's priority mode: "a" keeps its slot
    scheduler.optimate_call("restore")
    assert scheduler.policy.value == "fcfs"
    states = {s["name"]: s for s in scheduler.optimate_call("list")}
    assert states["priority"]["enabled"] and not states["priority"]["rolled_back"]
    d.assert_all_returned(64)


def test_run_time_update_and_errors(make):
    scheduler = make(PRIORITY)
    states = scheduler.optimate_call("update", {"name": "predictive", "options": {"max_wait_ms": 20}})
    by_name = {s["name"]: s for s in states}
    assert by_name["predictive"]["enabled"] and by_name["predictive"]["options"] == {"max_wait_ms": 20}
    assert scheduler.optimate_host.owner("batch") == "predictive"
    scheduler.optimate_call("update", {"name": "priority", "enabled": False})
    assert scheduler.optimate_host.owner("queue") == ""
    with pytest.raises(ValueError, match="does not run inside vLLM"):
        scheduler.optimate_call("update", {"name": "kv_quant"})
    with pytest.raises(ValueError, match="levels"):
        scheduler.optimate_call("update", {"name": "priority", "options": {"levels": "many"}})


def test_metrics_are_the_engines_own_series(make, driver):
    scheduler = make(PRIORITY, max_num_seqs=1)
    d = driver(scheduler)
    d.add(request("a", priority=0), request("b", priority=3))
    d.step()
    text = scheduler.optimate_call("metrics")
    assert 'optimate:num_requests_waiting_by_priority{model_name=' in text
    # The priority optimizer's level names, as optimate serve --priority-order lower-first
    # labels them: vLLM's priority 3 is the least important of the four default levels.
    assert 'priority="low"} 1.0' in text
    assert "optimate:batch_size_bucket" in text and "optimate:optimizer_seconds_total" in text
    assert "vllm:" not in text  # vLLM exports its own
    assert "optimate:host_kv_swap" not in text and "optimate:kv_cache_capacity_tokens" not in text  # no such tiers
    d.run()
    assert "optimate:request_queue_time_by_priority_seconds_count" in scheduler.optimate_call("metrics")


def test_async_scheduling_keeps_vllms_async_scheduler(make, driver):
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    scheduler = make(PRIORITY, async_scheduling=True)
    assert isinstance(scheduler, AsyncScheduler)


def test_predictive_holds_new_requests_within_its_max_wait(make, driver, clock):
    """At 200 arrivals a second, with nothing running, the batch policy holds a new request for
    a fuller batch and admits it once it has waited max_wait_ms (vLLM alone admits it at once)."""
    config = {"optimizers": {"predictive": {"max_wait_ms": 100, "require_gain": False}}}
    scheduler = make(config, max_num_seqs=64)
    d = driver(scheduler, step_ms=1)
    for i in range(20):
        d.add(request(f"w{i}", max_tokens=1))
        clock.advance_ms(5)
    d.run()
    d.add(request("a"))
    d.step()
    assert "a" not in d.admitted
    clock.advance_ms(60)
    d.add(request("b"))
    d.step()
    assert "a" not in d.admitted and "b" not in d.admitted
    clock.advance_ms(50)  # "a" has waited over 100 ms
    d.step()
    assert d.admitted[-2:] == ["a", "b"]  # one fuller batch
    d.run()
    d.assert_all_returned(64)
    counters = {s["name"]: s for s in scheduler.optimate_call("list")}["predictive"]["counters"]
    assert counters["waits"] == 1 and counters["launches_at_deadline"] == 1


def test_the_adaptive_controller_moves_vllms_limits_within_what_it_was_started_with(make, driver, clock):
    config = {"optimizers": {"priority": {}, "adaptive": {"ttft_p99_ms": 1, "tpot_p99_ms": 1000,
                                                           "interval_ms": 20, "window_ms": 200}}}
    scheduler = make(config, max_num_seqs=4)
    d = driver(scheduler, step_ms=25)
    seen = set()
    for i in range(30):
        d.add(request(f"r{i}", priority=i % 2, max_tokens=3))
        d.step()
        seen.add(scheduler.max_num_running_reqs)
    d.run()
    d.assert_all_returned(64)
    assert seen <= set(range(1, 5))  # never past the configured 4
    adaptive = {s["name"]: s for s in scheduler.optimate_call("list")}["adaptive"]
    assert adaptive["enabled"] and adaptive["counters"]["ticks"] > 0
    scheduler.optimate_call("update", {"name": "adaptive", "enabled": False})
    d.add(request("last"))
    d.step()
    assert scheduler.max_num_running_reqs == 4  # back to the configuration without the controller
    d.run()
