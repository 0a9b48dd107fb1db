"""Queue and batch policies written in Python, called by the C++ scheduler between steps."""

import warnings

import pytest

from conftest import run_to_completion, small_args
from optimate import (BatchDecision, BatchPolicy, EngineError, PolicyFallbackWarning, QueuePolicy, SamplingParams,
                      SchedulerView, create_optimized_engine)
from optimate.policies import PolicyKnobs

PARAMS = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


class LastComeFirstServed(QueuePolicy):
    name = "lcfs"

    def __init__(self):
        self.seen = []
        self.calls = 0

    def order_waiting(self, view):
        self.calls += 1
        self.seen.append([r.request_id for r in view.waiting])
        return list(reversed(range(len(view.waiting))))

    def counters(self):
        return {"calls": float(self.calls)}


def finish_order(engine):
    return [o.request_id for o in run_to_completion(engine) if o.finished]


def add_three(engine):
    for rid in ("a", "b", "c"):
        engine.add_request(rid, "Hello there", PARAMS)


def test_python_queue_policy_changes_the_admission_order(model):
    baseline = create_optimized_engine(small_args(model, max_num_seqs=1))
    add_three(baseline)
    assert finish_order(baseline) == ["a", "b", "c"]

    policy = LastComeFirstServed()
    engine = create_optimized_engine(small_args(model, max_num_seqs=1), optimizers=[policy])
    add_three(engine)
    assert finish_order(engine) == ["c", "b", "a"]
    assert policy.seen[0] == ["a", "b", "c"]  # the view lists the queue in arrival order
    listed = {o["name"]: o for o in engine.get_optimizers()}
    assert listed["lcfs"]["counters"]["calls"] == policy.calls > 0

    engine.set_optimizer("lcfs", enabled=False)  # back to first come, first served
    add_three(engine)
    assert finish_order(engine) == ["a", "b", "c"]


class HoldUntilThree(BatchPolicy):
    def decide(self, view):
        return BatchDecision(admit_waiting=len(view.waiting) >= 3 or len(view.running) > 0)


def test_python_batch_policy_holds_requests_back(model):
    engine = create_optimized_engine(small_args(model), optimizers=[HoldUntilThree()])
    engine.add_request("a", "Hello", PARAMS)
    engine.add_request("b", "Hello", PARAMS)
    assert engine.step() == [] and engine.get_stats()["num_running"] == 0
    engine.add_request("c", "Hello", PARAMS)
    engine.step()
    assert engine.get_stats()["num_running"] == 3
    assert sorted(finish_order(engine)) == ["a", "b", "c"]


class Broken(QueuePolicy):
    def __init__(self, answer):
        self.answer = answer

    def order_waiting(self, view):
        if self.answer == "raise":
            raise RuntimeError("policy bug")
        return self.answer


@pytest.mark.parametrize("answer", ["raise", [5], [0, 0], "not a list"])
def test_a_failing_python_policy_is_disabled_and_the_step_goes_on(model, answer):
    """The guard's rule, as for a C++ policy: that call gets the baseline's decision, the engine
    disables the policy, and every request completes; step() warns once and never raises."""
    policy = Broken(answer)
    engine = create_optimized_engine(small_args(model, max_num_seqs=1), optimizers=[policy])
    for rid in ("a", "b"):
        engine.add_request(rid, "Hello", PARAMS)
    with pytest.warns(PolicyFallbackWarning, match="Broken") as caught:
        first = engine.step()
    if answer == "raise":
        assert "RuntimeError: policy bug" in str(caught[0].message)
    assert first and first[0].request_id == "a"  # the baseline's arrival order ran the step
    engine.step()  # the engine disables a faulty optimizer between steps
    listed = {o["name"]: o for o in engine.get_optimizers()}
    assert listed["Broken"]["enabled"] is False
    assert listed["Broken"]["fallback"]["reason"] == "error"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # disabled: no more calls, no more warnings
        outputs = run_to_completion(engine)
    finished = [o for o in outputs if o.finished]
    assert [o.request_id for o in finished] == ["a", "b"]
    assert all(len(o.outputs[0].token_ids) == 3 for o in finished)
    assert engine.get_stats()["kv_used_blocks"] == 0

    engine.set_optimizer("Broken", enabled=True)  # the user turns it back on
    assert {o["name"]: o for o in engine.get_optimizers()}["Broken"]["enabled"] is True


class SeesEveryField(QueuePolicy):
    """Records the view's fields the hand-written mirror used to leave out."""

    def __init__(self):
        self.views = []

    def order_waiting(self, view):
        self.views.append(view)
        return list(range(len(view.waiting)))


def test_python_policies_see_the_cpp_views_fields(model):
    policy = SeesEveryField()
    engine = create_optimized_engine(small_args(model, max_num_seqs=1), optimizers=[policy])
    engine.add_request("a", "Hello there, how are you", PARAMS)
    engine.add_request("b", "Hello", PARAMS, metadata={"priority": 7})
    run_to_completion(engine)
    last = next(v for v in policy.views if len(v.running))  # "b" waits while "a" runs
    assert [r.request_id for r in last.running] == ["a"] and [r.request_id for r in last.waiting] == ["b"]
    # The client's metadata reaches the policy whole (higher-first: the engine's order as sent).
    assert last.waiting[0].metadata.priority == 7 and last.waiting[0].priority == 7
    assert last.running[0].metadata.priority == 0
    running = last.running[0]
    assert running.num_blocks >= 1 and running.num_full_blocks <= running.num_blocks
    assert running.num_kv_bytes > 0  # the KV its computed tokens hold
    assert last.mean_step_ns > 0 and last.prefill_ns_per_token >= 0
    assert last.knobs == PolicyKnobs() and last.knobs.batch_max_wait_ms is None
    assert not last.knobs.kv_quota.active()
    assert last.kv.block_size > 0 and 0 <= last.kv.used <= 1 and last.kv.default_precision is not None
    # Views are copies: they stay readable after the call.
    assert policy.views[0].waiting[0].request_id == "a"


def test_scheduler_view_can_be_built_in_python():
    view = SchedulerView()
    view.now_ns = 100
    view.set_queues([("w", 1, 0, 2, 50, 10, 0, 0, 16, 0, 0, 0, 0, -1, False)],
                    [("r", 0, 0, 1, 10, 8, 3, 11, 16, 1, 1, 0, 4096, 20, True)])
    assert view.waiting[0].request_id == "w" and view.waiting[0].priority == 2
    assert view.running[0].num_kv_bytes == 4096 and view.running[0].scheduled_this_step
    with pytest.raises(ValueError, match="waiting\\[0\\]"):
        view.set_queues([("w", 1)], [])
    # A front end whose waiting queue did not change replaces the running rows alone.
    view.set_running([("r2", 5, 0, 3, 30, 4, 0, 4, 8, 1, 1, 0, 0, 40, False)])
    assert [r.request_id for r in view.waiting] == ["w"] and view.waiting[0].priority == 2
    assert [r.request_id for r in view.running] == ["r2"] and view.running[0].admitted_ns == 40
    with pytest.raises(ValueError, match="running\\[0\\]"):
        view.set_running([("r", 1)])


def test_a_row_cache_makes_each_waiting_row_once():
    from optimate import _core

    class Req:  # a front end's request object
        def __init__(self, rid, priority):
            self.rid, self.priority = rid, priority

    made = []

    def row(r):
        made.append(r.rid)
        return (r.rid, len(made), 0, r.priority, 50, 10, 0, 0, 16, 0, 0, 0, 0, -1, False)

    cache = _core.RequestRowCache()
    view = SchedulerView()
    view.set_queues([], [("r", 0, 0, 1, 10, 8, 3, 11, 16, 1, 1, 0, 4096, 20, True)])
    a, b, c = Req("a", 1), Req("b", 2), Req("c", 3)
    cache.fill_waiting(view, [a, b], row)
    cache.fill_waiting(view, [b, c, a], row)
    assert [r.request_id for r in view.waiting] == ["b", "c", "a"] and made == ["a", "b", "c"]
    assert [r.priority for r in view.waiting] == [2, 3, 1]
    assert [r.request_id for r in view.running] == ["r"]  # the running rows stay
    # A row that changed is dropped by its id and made again when next needed.
    a.priority = 5
    cache.drop("a")
    cache.drop("never seen")
    cache.fill_waiting(view, [a], row)
    assert made == ["a", "b", "c", "a"] and view.waiting[0].priority == 5 and len(cache) == 3
    # Another object under a cached id gets its own row; the other's is forgotten.
    cache.fill_waiting(view, [Req("a", 7), b], row)
    assert [r.priority for r in view.waiting] == [7, 2] and len(cache) == 3
    # A row that is not one names its place, and the view keeps what it had.
    with pytest.raises(ValueError, match=r"waiting\[1\]"):
        cache.fill_waiting(view, [b, Req("d", 1)], lambda r: ("d", 1))
    assert [r.request_id for r in view.waiting] == ["a", "b"]
    # Failing after a new object took a cached id: the old object's row goes all the same.
    b2 = Req("b", 8)
    with pytest.raises(ValueError, match=r"waiting\[1\]"):
        cache.fill_waiting(view, [b2, Req("d", 1)], lambda r: row(r) if r.rid == "b" else ("d", 1))
    cache.drop("b")
    b.priority = 9
    cache.fill_waiting(view, [b], row)
    assert view.waiting[0].priority == 9 and len(cache) == 3  # a, c and b


def test_a_row_cache_lets_the_garbage_collector_see_what_it_holds():
    import gc
    import weakref

    from optimate import _core

    class Holder:  # a request object that refers back to the cache: a cycle
        pass

    def cycle():
        cache = _core.RequestRowCache()
        holder = Holder()
        holder.cache = cache
        cache.fill_waiting(SchedulerView(), [holder], lambda r: ("h", 1, 0, 1, 50, 10, 0, 0, 16, 0, 0, 0, 0, -1, False))
        return weakref.ref(holder)

    held = cycle()
    gc.collect()
    assert held() is None


def test_python_policy_name_must_be_new(model):
    class Fcfs(QueuePolicy):
        name = "fcfs"

        def order_waiting(self, view):
            return list(range(len(view.waiting)))

    with pytest.raises(ValueError, match="fcfs"):
        create_optimized_engine(small_args(model), optimizers=[Fcfs()])


def test_a_failing_policy_in_the_async_engine_is_reported_and_the_request_completes(model, monkeypatch):
    import asyncio
    import sys

    from optimate import AsyncLLMEngine

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    engine = AsyncLLMEngine.from_engine_args(small_args(model), optimizers=[Broken("raise")])

    async def main():
        async for out in engine.generate("Hello", PARAMS, "a"):
            last = out
        return last

    try:
        last = asyncio.run(main())
    finally:
        engine.shutdown()
    assert last.finished and len(last.outputs[0].token_ids) == 3
    assert reported and isinstance(reported[0], EngineError) and reported[0].code == "policy"
    assert isinstance(reported[0].__cause__, RuntimeError)


def test_engines_alive_at_exit_free_their_python_policies(model, tmp_path):
    """A module-level engine running a Python policy, at interpreter exit: the engine lets go of
    its C++ half first, so nothing outlives the extension (nanobind reported every such engine,
    its types and functions as leaked)."""
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(f"""
from optimate import AsyncLLMEngine, EngineArgs, QueuePolicy, SamplingParams, create_optimized_engine

class Lifo(QueuePolicy):
    def order_waiting(self, view):
        return list(reversed(range(len(view.waiting))))

args = EngineArgs(model={str(model)!r}, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
engine = create_optimized_engine(args, optimizers=[Lifo()])
engine.add_request("a", "Hello", SamplingParams(max_tokens=2))
while engine.has_unfinished_requests():
    engine.step()
other = AsyncLLMEngine.from_engine_args(args, optimizers=[Lifo()])
print("done")
""")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]
    assert "leaked" not in r.stderr, r.stderr[-2000:]
