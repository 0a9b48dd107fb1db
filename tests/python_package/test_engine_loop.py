"""The synchronous engine: add_request/step/abort, priorities, optimizers, KV accounting."""

import pytest

from conftest import run_to_completion, small_args
from optimate import EngineError, RequestOutputKind, SamplingParams, create_optimized_engine
from optimate.optimizers import PredictiveBatchingOptimizer, PrioritySchedulerOptimizer


def finish_order(engine):
    return [o.request_id for o in run_to_completion(engine) if o.finished]


def full_batch_then_urgent(engine, low: int = 0, high: int = 3):
    """Two long low-priority requests fill the batch (max_num_seqs=2), a third waits; then a
    short high-priority request arrives last."""
    long = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    for i in range(3):
        engine.add_request(f"low{i}", "Tell me a story.", long, metadata={"priority": low})
    engine.step()
    assert engine.get_stats()["num_running"] == 2
    engine.add_request("high", "Hi", SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                       metadata={"priority": high})
    return finish_order(engine)


def test_high_priority_request_added_last_under_a_full_batch_finishes_first(model):
    # aging_ms=0 and min_run_ms=0 keep the engine clock out of the decisions.
    priority = PrioritySchedulerOptimizer(aging_ms=0.0, min_run_ms=0.0)
    engine = create_optimized_engine(small_args(model, max_num_seqs=2), optimizers=[priority])
    order = full_batch_then_urgent(engine)
    assert order[0] == "high", order
    assert engine.get_stats()["num_preemptions"] >= 1
    counters = {o["name"]: o["counters"] for o in engine.get_optimizers()}
    assert counters["priority"]["preemptions_for_max_num_seqs"] >= 1

    # Without the optimizer the same arrival waits behind both running requests and the queue.
    baseline = create_optimized_engine(small_args(model, max_num_seqs=2))
    assert full_batch_then_urgent(baseline).index("high") >= 2


def test_lower_first_priorities_follow_the_engine_argument(model):
    # vLLM's rule: 0 is ordinary work, 3 background; the ordinary request added last goes first.
    priority = PrioritySchedulerOptimizer(aging_ms=0.0, min_run_ms=0.0)
    engine = create_optimized_engine(small_args(model, max_num_seqs=2, priority_order="lower-first"),
                                     optimizers=[priority])
    order = full_batch_then_urgent(engine, low=3, high=0)
    assert order[0] == "high", order


def test_outputs_are_cumulative_delta_or_final_only(model):
    engine = create_optimized_engine(small_args(model))
    greedy = dict(temperature=0, max_tokens=6, ignore_eos=True)
    engine.add_request("c", "The sky is", SamplingParams(**greedy))
    engine.add_request("d", "The sky is", SamplingParams(**greedy, output_kind=RequestOutputKind.DELTA))
    engine.add_request("f", "The sky is", SamplingParams(**greedy, output_kind=RequestOutputKind.FINAL_ONLY))
    seen = {"c": [], "d": [], "f": []}
    for out in run_to_completion(engine):
        seen[out.request_id].append(out)
    cumulative, deltas, final = seen["c"], seen["d"], seen["f"]
    assert len(final) == 1 and final[0].finished
    assert [len(o.outputs[0].token_ids) for o in cumulative] == sorted(len(o.outputs[0].token_ids) for o in cumulative)
    whole = cumulative[-1].outputs[0]
    assert len(whole.token_ids) == 6 and whole.finish_reason == "length"
    assert "".join(o.outputs[0].text for o in deltas) == whole.text == final[0].outputs[0].text
    assert sum((o.outputs[0].token_ids for o in deltas), []) == whole.token_ids
    assert cumulative[-1].prompt == "The sky is"
    assert cumulative[-1].prompt_token_ids == engine.encode("The sky is")
    assert cumulative[-1].metrics.first_token_time is not None


def test_n_samples_logprobs_and_stop_strings(model):
    engine = create_optimized_engine(small_args(model))
    engine.add_request("n", "Count: one, two,", SamplingParams(n=3, temperature=1.0, seed=3, max_tokens=5,
                                                               logprobs=2, ignore_eos=True))
    out = [o for o in run_to_completion(engine) if o.finished][0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for c in out.outputs:
        assert len(c.token_ids) == len(c.logprobs) == 5
        for token, probs in zip(c.token_ids, c.logprobs):
            assert token in probs and len(probs) <= 3
        assert c.cumulative_logprob == pytest.approx(sum(p[t].logprob for t, p in zip(c.token_ids, c.logprobs)))

    greedy = dict(temperature=0, max_tokens=16)
    engine.add_request("plain", "Count: one, two,", SamplingParams(**greedy))
    engine.add_request("cut", "Count: one, two,", SamplingParams(**greedy, stop=" four"))
    engine.add_request("kept", "Count: one, two,", SamplingParams(**greedy, stop=" four", include_stop_str_in_output=True))
    done = {o.request_id: o.outputs[0] for o in run_to_completion(engine) if o.finished}
    plain = done["plain"].text
    assert " four" in plain  # the greedy continuation passes the stop string
    assert done["cut"].text == plain[:plain.index(" four")]
    assert done["kept"].text == plain[:plain.index(" four") + len(" four")]
    assert (done["cut"].finish_reason, done["cut"].stop_reason) == ("stop", " four")


def test_abort_frees_every_kv_block(model):
    engine = create_optimized_engine(small_args(model, max_num_seqs=4))
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    for i in range(6):  # four run, two wait
        engine.add_request(f"r{i}", "A long story about a dragon, told slowly:", params)
    for _ in range(3):
        engine.step()
    stats = engine.get_stats()
    assert stats["num_running"] == 4 and stats["num_waiting"] == 2 and stats["kv_used_blocks"] > 0
    engine.abort_request([f"r{i}" for i in range(6)])
    outputs = engine.step()
    assert sorted(o.request_id for o in outputs) == [f"r{i}" for i in range(6)]
    assert all(o.finished and o.outputs[0].finish_reason == "abort" for o in outputs)
    assert not engine.has_unfinished_requests()
    stats = engine.get_stats()
    assert (stats["num_running"], stats["num_waiting"], stats["kv_used_blocks"]) == (0, 0, 0)
    # The ids are free again.
    engine.add_request("r0", "Hi", SamplingParams(max_tokens=1))
    run_to_completion(engine)


def test_optimizers_retune_and_roll_back_between_steps(model):
    engine = create_optimized_engine(small_args(model), optimizers=[PrioritySchedulerOptimizer(levels=3)])
    listed = {o["name"]: o for o in engine.get_optimizers()}
    assert listed["priority"]["options"] == {"levels": 3} and not listed["priority"]["baseline"]
    assert listed["launch-at-once"]["baseline"]

    engine.set_optimizer(PredictiveBatchingOptimizer(max_wait_time_ms=20))
    engine.set_optimizer("priority", aging_ms=100.0)
    listed = {o["name"]: o for o in engine.get_optimizers()}
    assert listed["predictive"]["options"] == {"max_wait_ms": 20}
    assert listed["priority"]["options"] == {"levels": 3, "aging_ms": 100.0}
    assert "launch-at-once" not in listed

    engine.set_optimizer("predictive", enabled=False)  # rollback to the baseline
    listed = {o["name"]: o for o in engine.get_optimizers()}
    assert not listed["predictive"]["enabled"] and listed["launch-at-once"]["baseline"]
    engine.add_request("a", "Hi", SamplingParams(max_tokens=2))
    run_to_completion(engine)

    with pytest.raises(EngineError) as err:
        engine.set_optimizer("no-such-optimizer")
    assert err.value.code == "not_found" and "priority" in str(err.value)
    with pytest.raises(ValueError, match="levels"):
        engine.set_optimizer("priority", levels=0)


def test_an_engine_stepped_from_two_threads_raises_instead_of_corrupting(model):
    """LLMEngine is not thread-safe (as vLLM's): a call from a second thread while one steps is
    an error naming the rule, where it corrupted the heap (segfault). LLM.generate from several
    threads runs their batches one after another, each with its own results."""
    import threading

    from optimate import LLM

    engine = create_optimized_engine(small_args(model, max_num_seqs=4))
    for i in range(4):
        engine.add_request(f"r{i}", "Once upon a time", SamplingParams(max_tokens=64, ignore_eos=True))
    errors, stop = [], threading.Event()

    def other_thread():
        while not stop.is_set():
            try:
                engine.get_stats()
            except EngineError as e:
                errors.append(str(e))
                return

    t = threading.Thread(target=other_thread)
    t.start()
    run_to_completion(engine)
    stop.set()
    t.join()
    assert errors and all("not thread-safe" in e for e in errors)

    llm = LLM(model, device="cpu", kv_cache_memory="256MiB", max_model_len=2048)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = [o.outputs[0].text for o in llm.generate(["Hello", "Goodbye", "Maybe"], params)]
    results = [None] * 4

    def batch(k):
        results[k] = [o.outputs[0].text for o in llm.generate(["Hello", "Goodbye", "Maybe"], params, use_tqdm=False)]

    threads = [threading.Thread(target=batch, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [expected] * 4
