"""AsyncLLMEngine: `async for output in engine.generate(prompt, params, request_id)`."""

import asyncio

import pytest

from conftest import small_args
from optimate import AsyncLLMEngine, EngineError, LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(model):
    e = AsyncLLMEngine.from_engine_args(small_args(model, max_num_seqs=4))
    yield e
    e.shutdown()


async def collect(engine, prompt, request_id, params=GREEDY):
    outputs = []
    async for out in engine.generate(prompt, params, request_id):
        outputs.append(out)
    return outputs


def test_concurrent_streams_match_the_offline_engine(engine, model):
    async def main():
        return await asyncio.gather(*(collect(engine, f"Story number {i}:", f"s{i}") for i in range(6)))

    streams = asyncio.run(main())
    offline = LLM(model, device="cpu", kv_cache_memory="256MiB", max_model_len=2048).generate(
        [f"Story number {i}:" for i in range(6)], GREEDY)
    for stream, expected in zip(streams, offline):
        assert stream[-1].finished and not any(o.finished for o in stream[:-1])
        texts = [o.outputs[0].text for o in stream]
        assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative
        assert stream[-1].outputs[0].token_ids == expected.outputs[0].token_ids
        assert stream[-1].outputs[0].text == expected.outputs[0].text


def test_leaving_the_loop_early_aborts_the_request(engine):
    async def main():
        async for out in engine.generate("Once upon a time", SamplingParams(max_tokens=200, ignore_eos=True), "early"):
            if len(out.outputs[0].token_ids) >= 2:
                break
        # The engine thread applies commands in order: once a later request has finished and a
        # round trip through the engine thread has returned, the abort has been applied and
        # the stats snapshot is newer than both.
        await collect(engine, "Hi", "after")
        await engine.get_optimizers()
        return engine.get_stats()

    stats = asyncio.run(main())
    assert (stats["num_running"], stats["num_waiting"], stats["kv_used_blocks"]) == (0, 0, 0)


def test_errors_reach_the_caller(engine):
    async def too_long():
        return await collect(engine, "word " * 10000, "long")

    with pytest.raises(ValueError):
        asyncio.run(too_long())

    async def optimizers():
        await engine.set_optimizer("priority", aging_ms=0.0)
        listed = {o["name"]: o for o in await engine.get_optimizers()}
        assert listed["priority"]["options"] == {"aging_ms": 0.0}
        with pytest.raises(EngineError):
            await engine.set_optimizer("no-such-optimizer")

    asyncio.run(optimizers())


def test_after_shutdown_calls_raise_instead_of_waiting_forever(model):
    """vLLM's AsyncLLM after shutdown(): is_running is False and calls raise. Here they waited
    forever for an engine thread that was gone."""
    e = AsyncLLMEngine.from_engine_args(small_args(model, max_num_seqs=2))
    assert e.is_running
    e.shutdown()
    assert not e.is_running

    async def ask():
        with pytest.raises(EngineError, match="shut down"):
            await asyncio.wait_for(e.get_optimizers(), 30)
        with pytest.raises(EngineError, match="shut down"):
            await asyncio.wait_for(e.set_optimizer("priority", enabled=True), 30)
        with pytest.raises(EngineError, match="shutting down"):
            async for _ in e.generate("Hello", SamplingParams(max_tokens=2), "late"):
                pass

    asyncio.run(ask())


def test_get_optimizers_reports_the_guards_fallback(model):
    """As LLMEngine.get_optimizers: a policy the guard disabled is listed disabled, with why."""
    import warnings

    from optimate import QueuePolicy

    class Raises(QueuePolicy):
        def order_waiting(self, view):
            raise RuntimeError("policy bug")

    e = AsyncLLMEngine.from_engine_args(small_args(model, max_num_seqs=1), optimizers=[Raises()])
    try:
        async def main():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await collect(e, "Hello", "a")
                await collect(e, "Hello", "b")
            return {o["name"]: o for o in await e.get_optimizers()}

        listed = asyncio.run(main())
        assert listed["Raises"]["enabled"] is False
        assert listed["Raises"]["fallback"]["reason"] == "error"
        assert {"seconds_total", "rolled_back", "baseline"} <= listed["Raises"].keys()
    finally:
        e.shutdown()
