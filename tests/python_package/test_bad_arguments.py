"""Bad arguments raise ValueError naming what is wrong; other failures raise EngineError."""

import pytest

from conftest import small_args
from optimate import EngineArgs, EngineError, LLM, SamplingParams, create_optimized_engine
from optimate.optimizers import PredictiveBatchingOptimizer, PrioritySchedulerOptimizer


@pytest.mark.parametrize("settings, word", [
    (dict(max_num_seqs=0), "max-num-seqs"),
    (dict(block_size=3), "block-size"),
    (dict(device="tpu"), "device"),
    (dict(gpu_memory_utilization=1.5), "gpu-memory-utilization"),
    (dict(kv_cache_dtype="fp6"), "kv_cache_dtype"),
    (dict(kv_cache_memory="lots"), "kv_cache_memory"),
    (dict(max_num_seqs="many"), "max_num_seqs"),
    (dict(tensor_parallel_size=0), "tensor-parallel-size"),
])
def test_bad_engine_args(settings, word):
    with pytest.raises(ValueError, match=word):
        EngineArgs(model="m.gguf", **settings)


@pytest.mark.parametrize("params, word", [
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(n=0), "n must"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(logprobs=50), "logprobs"),
    (dict(stop=[""]), "stop"),
    (dict(temperature="hot"), "temperature"),
])
def test_bad_sampling_params(params, word):
    with pytest.raises(ValueError, match=word):
        SamplingParams(**params)


def test_bad_optimizer_options():
    with pytest.raises(ValueError, match="levels"):
        PrioritySchedulerOptimizer(levels=0)
    with pytest.raises(ValueError, match="no option 'aging'"):
        PrioritySchedulerOptimizer(aging=1.0)
    with pytest.raises(ValueError, match="must be float"):
        PredictiveBatchingOptimizer(max_wait_ms="soon")


def test_tensor_parallel_size_that_does_not_split_the_model(model):
    # The embedded model has 9 attention heads and 3 KV heads: 3 ranks split it, 2 do not.
    with pytest.raises(ValueError, match="9 attention heads"):
        create_optimized_engine(small_args(model, tensor_parallel_size=2))


def test_bad_requests(model):
    engine = create_optimized_engine(small_args(model, max_model_len=64))
    engine.add_request("a", "Hello", SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("a", "Hello", SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="context|long"):
        engine.add_request("long", "word " * 200, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="vocabulary"):
        engine.add_request("ids", [1, 2, 10**9], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="metadata"):
        engine.add_request("m", "Hello", SamplingParams(), metadata={"priorty": 1})
    with pytest.raises(ValueError, match="unknown key 'colour' \\(known: priority\\)"):
        engine.add_request("m", "Hello", SamplingParams(), metadata={"priority": 1, "colour": "red"})
    with pytest.raises(ValueError, match="priority must be an int"):
        engine.add_request("m", "Hello", SamplingParams(), metadata={"priority": "high"})
    with pytest.raises(ValueError, match="64 bits"):
        engine.add_request("m", "Hello", SamplingParams(), metadata={"priority": 2**70})
    with pytest.raises(ValueError, match="prompt"):
        engine.add_request("p", 3.5, SamplingParams())
    # Nothing was lost: the first request still runs to its end.
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert [o.request_id for o in outputs if o.finished] == ["a"]


def test_missing_model_is_an_engine_error(tmp_path):
    with pytest.raises(EngineError) as err:
        LLM(str(tmp_path / "missing.gguf"))
    assert err.value.code == "not_found"


def test_vllm_spellings_are_taken_and_wrong_types_named():
    """seed=-1 is vLLM's "no seed"; a stop that is not text, an enabled that is not a bool and
    sampling params that are not SamplingParams are ValueErrors naming them."""
    assert SamplingParams(seed=-1).seed is None
    with pytest.raises(ValueError, match="n must be 1 when using greedy sampling"):
        SamplingParams(n=3, temperature=0)
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=123)


def test_wrong_types_at_the_engine_are_named(model):
    from optimate import LLM

    llm = LLM(model, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate(["Hello"], 5)
    with pytest.raises(ValueError, match="enabled"):
        llm.llm_engine.set_optimizer("priority", enabled="no")


def test_chat_takes_openai_message_shapes(model):
    """As the server and vLLM's LLM.chat: content as a list of text parts, None, or absent."""
    from optimate import LLM

    llm = LLM(model, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
    greedy = SamplingParams(temperature=0, max_tokens=4)
    plain = llm.chat([{"role": "user", "content": "Hi\nthere"}], greedy, use_tqdm=False)
    parts = llm.chat([{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
                     greedy, use_tqdm=False)
    assert parts[0].outputs[0].text == plain[0].outputs[0].text
    llm.chat([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None},
              {"role": "user", "content": "again"}], greedy, use_tqdm=False)
    llm.chat([{"role": "user", "content": "Hi"}, {"role": "assistant"}, {"role": "user", "content": "again"}],
             greedy, use_tqdm=False)
    with pytest.raises(ValueError, match="text content parts"):
        llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], greedy)


@pytest.mark.parametrize("prompt, word", [
    (b"hello", "prompt"), ([1.7, 5], "token ids"), (["5"], "token ids"), ([2**63], "token ids"),
    ({"prompt": None}, "text"), ({"prompt_token_ids": "12"}, "token ids"), ("\ud800", "Unicode"),
])
def test_prompts_of_the_wrong_shape_are_named(model, prompt, word):
    engine = create_optimized_engine(small_args(model, max_model_len=64))
    with pytest.raises(ValueError, match=word):
        engine.add_request("r", prompt, SamplingParams(max_tokens=2))


def test_llm_priority_is_one_for_all_or_one_per_prompt(model):
    """As python.md says; anything else is a ValueError naming it."""
    from optimate import LLM

    llm = LLM(model, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
    greedy = SamplingParams(temperature=0, max_tokens=2)
    one = llm.generate(["Hi", "there"], greedy, priority=5, use_tqdm=False)
    each = llm.generate(["Hi", "there"], greedy, priority=[5, 5], use_tqdm=False)
    assert [o.outputs[0].text for o in one] == [o.outputs[0].text for o in each]
    for bad in ("high", 1.5, True):
        with pytest.raises(ValueError, match="priority must be an int"):
            llm.generate(["Hi"], greedy, priority=bad, use_tqdm=False)
    with pytest.raises(ValueError, match="3 priorities for 2 prompts"):
        llm.generate(["Hi", "there"], greedy, priority=[1, 2, 3], use_tqdm=False)


@pytest.mark.parametrize("prompts", [None, 5])
def test_llm_prompts_that_are_not_prompts_are_named(model, prompts):
    from optimate import LLM

    llm = LLM(model, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
    with pytest.raises(ValueError, match="prompts must be"):
        llm.generate(prompts, use_tqdm=False)


@pytest.mark.parametrize("messages, word", [
    ("hi", "messages must be"), ([{"role": 5, "content": None}], "role must be a string"), ([["hi"]], "conversation"),
])
def test_llm_chat_messages_of_the_wrong_shape_are_named(model, messages, word):
    from optimate import LLM

    llm = LLM(model, device="cpu", kv_cache_memory="64MiB", max_model_len=512)
    with pytest.raises(ValueError, match=word):
        llm.chat(messages, use_tqdm=False)
