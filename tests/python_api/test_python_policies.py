"""Queue and batch policies written in Python, called by the C++ scheduler between steps."""

import pytest

from conftest import run_to_completion, small_args
from optimate import (BatchDecision, BatchPolicy, EngineError, QueuePolicy, SamplingParams,
                      create_optimized_engine)

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
def test_a_failing_python_policy_raises_after_the_step_and_loses_nothing(model, answer):
    engine = create_optimized_engine(small_args(model), optimizers=[Broken(answer)])
    engine.add_request("a", "Hello", PARAMS)
    with pytest.raises(EngineError) as err:
        engine.step()
    assert err.value.code == "policy" and "Broken" in str(err.value)
    if answer == "raise":
        assert isinstance(err.value.__cause__, RuntimeError)
    # The step ran with arrival order; its output comes with the next step.
    engine.set_optimizer("Broken", enabled=False)
    outputs = run_to_completion(engine)
    assert outputs[0].outputs[0].token_ids and not outputs[0].finished  # the failed step's output
    assert outputs[-1].finished and len(outputs[-1].outputs[0].token_ids) == 3


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
