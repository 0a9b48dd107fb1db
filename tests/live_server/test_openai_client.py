"""The official `openai` client against `optimate serve`: what a drop-in user of vLLM relies on."""

import httpx
import openai
import pytest

from conftest import API_KEY, MODEL_NAME

CHAT = [{"role": "user", "content": "Name three colors."}]
GREEDY = {"temperature": 0.0}


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_chat_non_streaming(client, server):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=12, **GREEDY)
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    # The prompt is exactly what /tokenize makes of the same messages through the chat template.
    count = httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "messages": CHAT}).json()["count"]
    assert r.usage.prompt_tokens == count
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_matches_non_streaming(client):
    whole = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=12, **GREEDY)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=12, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    content_chunks = [c for c in chunks if c.choices]
    # No empty role-only chunk ahead of the first token: the first chunk already has text.
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert content_chunks[0].choices[0].delta.content
    assert "".join(c.choices[0].delta.content or "" for c in content_chunks) == whole.choices[0].message.content
    assert content_chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # include_usage: one last chunk with no choices carries the usage.
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_non_streaming_and_streaming(client):
    kwargs = dict(model=MODEL_NAME, prompt="The capital of France is", max_tokens=8,
                  extra_body={"ignore_eos": True}, **GREEDY)
    whole = client.completions.create(**kwargs)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 8
    streamed = list(client.completions.create(stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == whole.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"


def test_n_equals_two(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=6, n=2,
                                  temperature=1.0, seed=1234, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 12
    streamed = list(client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=6, n=2,
                                              temperature=1.0, seed=1234, stream=True,
                                              extra_body={"ignore_eos": True}))
    texts = {0: "", 1: ""}
    for chunk in streamed:
        for c in chunk.choices:
            texts[c.index] += c.text
    # A fixed seed gives the same samples whether streamed or not.
    assert texts == {c.index: c.text for c in r.choices}


def test_stop_string_cuts_the_text(client):
    kwargs = dict(model=MODEL_NAME, prompt="List the numbers from one to twenty: one, two,", max_tokens=24,
                  **GREEDY)
    full = client.completions.create(extra_body={"ignore_eos": True}, **kwargs).choices[0].text
    # A stop string that starts in the middle of the generated text.
    start = len(full) // 2
    stop = full[start:start + 3]
    assert len(stop.strip()) > 0, full
    expected = full[:full.find(stop)]
    r = client.completions.create(stop=[stop], extra_body={"ignore_eos": True}, **kwargs)
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].stop_reason == stop
    streamed = client.completions.create(stop=[stop], stream=True, extra_body={"ignore_eos": True}, **kwargs)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == expected
    kept = client.completions.create(stop=[stop], extra_body={"ignore_eos": True,
                                                               "include_stop_str_in_output": True}, **kwargs)
    assert kept.choices[0].text == expected + stop


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=5, logprobs=3,
                                  extra_body={"ignore_eos": True}, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0.0
        assert 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)
    assert lp.text_offset == sorted(lp.text_offset)


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=5, logprobs=True,
                                       top_logprobs=2, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 2
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob, abs=1e-5)


def test_context_overflow_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="hello", max_tokens=10_000_000)
    assert "maximum context length" in str(e.value)


def test_max_tokens_below_one_is_bad_request(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=0)


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=4)


def test_api_key(guarded_server):
    wrong = openai.OpenAI(base_url=guarded_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=guarded_server.url + "/v1", api_key=API_KEY, max_retries=0)
    assert [m.id for m in right.models.list().data] == [MODEL_NAME]
    # /health and /metrics stay open.
    assert httpx.get(guarded_server.url + "/health").status_code == 200
    assert httpx.get(guarded_server.url + "/metrics").status_code == 200


def test_full_queue_is_503_with_retry_after(guarded_server):
    r = httpx.post(guarded_server.url + "/v1/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                   json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["message"]


def test_queue_time_histograms_count_finished_requests(client, server):
    before = server.metric("vllm:request_queue_time_seconds_count")
    before_priority = server.metric("optimate:request_queue_time_by_priority_seconds_count")
    client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=2)
    assert server.metric("vllm:request_queue_time_seconds_count") == before + 1
    assert server.metric("optimate:request_queue_time_by_priority_seconds_count") == before_priority + 1


def error_of(e: openai.APIStatusError) -> dict:
    body = e.body if isinstance(e.body, dict) else {}
    return body.get("error", body)


def prompt_tokens(server, prompt: str) -> int:
    return httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": prompt}).json()["count"]


def test_batched_prompts_as_vllm_answers_them(client, server):
    # LangChain's OpenAI(...).batch and many scripts send a list of prompts in one request.
    prompts = ["The capital of France is", "One, two, three,"]
    kwargs = dict(model=MODEL_NAME, max_tokens=3, extra_body={"ignore_eos": True}, **GREEDY)
    # n > 1 is refused with temperature 0, as vLLM refuses it; top_k 1 draws the same argmax.
    r = client.completions.create(prompt=prompts, n=2, model=MODEL_NAME, max_tokens=3, temperature=1.0,
                                  extra_body={"ignore_eos": True, "top_k": 1})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]  # prompt_index * n + i
    singles = [client.completions.create(prompt=p, **kwargs).choices[0].text for p in prompts]
    assert [c.text for c in r.choices] == [singles[0], singles[0], singles[1], singles[1]]
    assert r.usage.prompt_tokens == sum(prompt_tokens(server, p) for p in prompts)
    assert r.usage.completion_tokens == 4 * 3
    # Lists of token ids, streamed: the same texts, one response id, usage summed at the end.
    ids = [httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": p}).json()["tokens"]
           for p in prompts]
    chunks = list(client.completions.create(prompt=ids, stream=True, stream_options={"include_usage": True},
                                            **kwargs))
    texts = {}
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {0: singles[0], 1: singles[1]}
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].usage.completion_tokens == 2 * 3


def test_completions_context_error_names_the_prompt(client):
    long_prompt = "word " * 10000
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt=long_prompt, max_tokens=4)
    assert "in the prompt" in str(e.value) and "messages" not in str(e.value)
    assert error_of(e.value)["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="hello", max_tokens=10_000_000)
    assert "in the prompt, 10000000 in the completion" in str(e.value)


def test_error_text_survives_a_nul(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt\u0000-evil", prompt="hi", max_tokens=1)
    assert error_of(e.value)["message"] == "The model `gpt\u0000-evil` does not exist."
