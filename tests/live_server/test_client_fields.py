"""vLLM's request fields through the official `openai` client: each is honoured or refused with a
400 naming it (docs/openai-compatibility.md has the table)."""

import json
import re

import httpx
import jsonschema
import openai
import pytest

from conftest import MODEL_NAME

GREEDY = {"temperature": 0.0}
CHAT = [{"role": "user", "content": "Describe a cat."}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}


# --- prompt logprobs -------------------------------------------------------------------------

def test_echo_logprobs_max_tokens_zero_scores_the_prompt(client, server):
    """lm-evaluation-harness's loglikelihood request: the prompt back with its tokens' logprobs."""
    prompt = "The capital of France is Paris"
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    choice = r.choices[0]
    assert choice.text == prompt
    lp = choice.logprobs
    count = httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": prompt}).json()["count"]
    assert len(lp.tokens) == len(lp.token_logprobs) == count == r.usage.prompt_tokens
    assert "".join(lp.tokens) == prompt
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0.0 for x in lp.token_logprobs[1:])
    assert r.usage.completion_tokens == 0


def test_echo_scores_a_prompt_longer_than_one_steps_rows(client, server):
    """A prompt whose logits take several steps (at most 512 rows a step) is scored whole."""
    prompt = " ".join(f"item {i}," for i in range(300))
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=0, echo=True, logprobs=0)
    lp = r.choices[0].logprobs
    assert r.usage.prompt_tokens > 600
    assert len(lp.token_logprobs) == r.usage.prompt_tokens
    assert lp.token_logprobs[0] is None and all(x <= 0.0 for x in lp.token_logprobs[1:])
    assert r.choices[0].text == prompt


def test_prompt_logprob_equals_the_generated_tokens_logprob(client):
    """The logprob echo reports for a prompt's last token is the one generation gave that token."""
    prefix = "One, two, three, four,"
    gen = client.completions.create(model=MODEL_NAME, prompt=prefix, max_tokens=1, logprobs=0, **GREEDY)
    token, logprob = gen.choices[0].logprobs.tokens[0], gen.choices[0].logprobs.token_logprobs[0]
    scored = client.completions.create(model=MODEL_NAME, prompt=prefix + token, max_tokens=0, echo=True, logprobs=0)
    lp = scored.choices[0].logprobs
    assert lp.tokens[-1] == token
    assert lp.token_logprobs[-1] == pytest.approx(logprob, abs=2e-3)


def test_prompt_logprobs_field(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello there, friend", max_tokens=2,
                                  extra_body={"prompt_logprobs": 2}, **GREEDY)
    body = r.model_dump()
    entries = body["choices"][0]["prompt_logprobs"]
    assert entries[0] is None
    for position in entries[1:]:
        assert 1 <= len(position) <= 3
        ranks = sorted(v["rank"] for v in position.values())
        assert ranks[0] >= 1
    with pytest.raises(openai.BadRequestError, match="prompt_logprobs"):
        client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2, stream=True,
                                  extra_body={"prompt_logprobs": 1})


def test_top_logprobs_in_chat(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=4, logprobs=True,
                                       top_logprobs=5, **GREEDY)
    for entry in r.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 5
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)


# --- structured outputs ----------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_output_parses_and_matches(client, temperature):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Give me a person as JSON."}], max_tokens=80,
        temperature=temperature, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


def test_json_object_output_is_an_object(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=60, seed=1,
                                       response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a JSON object's start
        assert r.choices[0].message.content.lstrip().startswith("{")


def test_guided_choice_regex_and_grammar(client):
    choice = client.completions.create(model=MODEL_NAME, prompt="Is the sky blue?", max_tokens=10, seed=2,
                                       extra_body={"guided_choice": ["yes", "no", "maybe"]})
    assert choice.choices[0].text in ("yes", "no", "maybe")
    regex = client.completions.create(model=MODEL_NAME, prompt="A phone number:", max_tokens=20, seed=2,
                                      extra_body={"guided_regex": r"\d{3}-\d{4}"})
    assert re.fullmatch(r"\d{3}-\d{4}", regex.choices[0].text)
    grammar = client.completions.create(model=MODEL_NAME, prompt="Count:", max_tokens=20, seed=2,
                                        extra_body={"guided_grammar": 'root ::= ("one" | "two") " " ("a" | "b")'})
    assert re.fullmatch(r"(one|two) (a|b)", grammar.choices[0].text)
    structured = client.completions.create(model=MODEL_NAME, prompt="Pick:", max_tokens=10, seed=2,
                                           extra_body={"structured_outputs": {"choice": ["red", "green"]}})
    assert structured.choices[0].text in ("red", "green")


def test_structured_outputs_stream_the_same(client):
    kwargs = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "A person, please."}], max_tokens=80,
                  response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
                  **GREEDY)
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs)
                       if c.choices)
    assert streamed == whole
    jsonschema.validate(json.loads(streamed), PERSON)


def test_bad_grammar_is_a_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError, match="guided_regex"):
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=4, extra_body={"guided_regex": "(["})
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=4,
                                  extra_body={"guided_choice": ["a"], "guided_regex": "a"})


# --- tool calls ------------------------------------------------------------------------------

def _call_args(call) -> dict:
    return json.loads(call.function.arguments)


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_call(client, tool_choice):
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], tool_choice=tool_choice, max_tokens=60, **GREEDY)
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].id.startswith("chatcmpl-tool-")
    jsonschema.validate(_call_args(calls[0]), WEATHER_TOOL["function"]["parameters"])
    # A tool call needs no answer text (vLLM's shape); "tool_calls" only for "auto"/"required".
    assert r.choices[0].finish_reason in ("tool_calls", "stop")


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_streamed_tool_call_deltas_rebuild_the_call(client, tool_choice):
    kwargs = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Rome?"}],
                  tools=[WEATHER_TOOL], tool_choice=tool_choice, max_tokens=60, **GREEDY)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    assert whole  # a required or named tool is called
    names, args, ids = {}, {}, {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or []:
                if d.id:
                    ids[d.index] = d.id
                if d.function and d.function.name:
                    names[d.index] = d.function.name
                if d.function and d.function.arguments:
                    args[d.index] = args.get(d.index, "") + d.function.arguments
    assert names == {i: c.function.name for i, c in enumerate(whole)}
    assert {i: json.loads(a) for i, a in args.items()} == {i: _call_args(c) for i, c in enumerate(whole)}
    assert set(ids) == set(names) == set(range(len(whole)))  # every rebuilt call has its id
    assert all(v.startswith("chatcmpl-tool-") for v in ids.values())


def test_tool_call_history_renders(client):
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call1", "content": "Sunny, 20 C"},
    ]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=[WEATHER_TOOL],
                                       tool_choice="auto", max_tokens=8, **GREEDY)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_unknown_named_tool_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, tools=[WEATHER_TOOL], max_tokens=4,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})


# --- sampling controls -----------------------------------------------------------------------

def test_tokenize_spells_each_token_as_the_vocabulary_does(server):
    body = {"model": MODEL_NAME, "prompt": "Hello world\n", "add_special_tokens": False}
    plain = httpx.post(server.url + "/tokenize", json=body).json()
    assert plain["token_strs"] is None
    spelled = httpx.post(server.url + "/tokenize", json={**body, "return_token_strs": True}).json()
    # SmolLM2's byte-level vocabulary as transformers' convert_ids_to_tokens spells it (vLLM's
    # token_strs): a leading space is "\u0120", a newline "\u010a".
    assert spelled["tokens"] == plain["tokens"] == [19556, 905, 198]
    assert spelled["token_strs"] == ["Hello", "\u0120world", "\u010a"]


def test_logit_bias_forces_a_token(client, server):
    token = httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": " blue",
                                                       "add_special_tokens": False}).json()["tokens"][0]
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=4, logit_bias={str(token): 100},
                                  extra_body={"ignore_eos": True, "return_token_ids": True}, **GREEDY)
    assert r.model_dump()["choices"][0]["token_ids"] == [token] * 4


def test_seed_reproduces_a_sample(client):
    kwargs = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=1234,
                  extra_body={"ignore_eos": True})
    assert client.completions.create(**kwargs).choices[0].text == client.completions.create(**kwargs).choices[0].text


def test_penalties_break_a_repetition(client):
    def repeats(**fields) -> int:
        extra = {"ignore_eos": True, "return_token_ids": True, **fields.pop("extra", {})}
        r = client.completions.create(model=MODEL_NAME, prompt="1 1 1 1", max_tokens=16, extra_body=extra,
                                      **fields, **GREEDY)
        ids = r.model_dump()["choices"][0]["token_ids"]
        return len(ids) - len(set(ids))

    plain = repeats()
    assert plain >= 10  # greedy decoding repeats the pattern
    assert repeats(frequency_penalty=2.0) < plain / 2
    assert repeats(presence_penalty=2.0) < plain / 2
    assert repeats(extra={"repetition_penalty": 2.0}) < plain / 2


def test_best_of_returns_n_choices(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=6, n=2, best_of=4, temperature=1.0,
                                  seed=5)
    assert len(r.choices) == 2
    assert [c.index for c in r.choices] == [0, 1]


def test_stop_token_ids_min_tokens_and_include_stop_str(client, server):
    ids = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3,", max_tokens=10, extra_body={
        "ignore_eos": True, "return_token_ids": True}, **GREEDY).model_dump()["choices"][0]["token_ids"]
    stop_id = ids[2]
    r = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3,", max_tokens=10,
                                  extra_body={"ignore_eos": True, "stop_token_ids": [stop_id]}, **GREEDY)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].model_extra.get("stop_reason") == stop_id or r.model_dump()["choices"][0]["stop_reason"] == stop_id
    text = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3,", max_tokens=10,
                                     extra_body={"ignore_eos": True}, **GREEDY).choices[0].text
    stop = text.strip()[:2]
    kept = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3,", max_tokens=10, stop=[stop],
                                     extra_body={"ignore_eos": True, "include_stop_str_in_output": True}, **GREEDY)
    assert kept.choices[0].text.endswith(stop)
    at_least = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                              max_tokens=20, extra_body={"min_tokens": 15}, **GREEDY)
    assert at_least.usage.completion_tokens >= 15


def test_skip_special_tokens_false_shows_them(client, server):
    special = httpx.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": "<|im_start|>",
                                                         "add_special_tokens": False}).json()["tokens"]
    assert len(special) == 1

    def text(skip: bool, spaces: bool = True) -> str:  # three of the special token, forced
        return client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=3, logit_bias={str(special[0]): 100},
                                         extra_body={"ignore_eos": True, "skip_special_tokens": skip,
                                                     "spaces_between_special_tokens": spaces},
                                         **GREEDY).choices[0].text

    assert text(False) == "<|im_start|>" * 3
    assert text(True) == ""
    # This byte-level tokenizer puts nothing between special tokens: vLLM's text is the same.
    assert text(False, spaces=False) == "<|im_start|>" * 3


def test_continuous_usage_stats(client):
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=4, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True},
                                            extra_body={"ignore_eos": True}, **GREEDY))
    with_choices = [c for c in chunks if c.choices]
    assert all(c.usage is not None for c in with_choices)
    assert [c.usage.completion_tokens for c in with_choices] == sorted(c.usage.completion_tokens for c in with_choices)


@pytest.mark.parametrize("field,value", [("use_beam_search", True), ("logits_processors", ["x"]),
                                         ("prompt_embeds", "AAAA"), ("suffix", "tail")])
def test_unbuilt_fields_are_a_400_naming_them(client, field, value):
    with pytest.raises(openai.BadRequestError, match=field):
        client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2, extra_body={field: value})


def test_reasoning_effort_takes_vllms_values_only(client):
    # The openai client's own type lists the values OpenAI takes; vLLM adds "xhigh" and "max".
    for effort in ("low", "high", "max"):
        out = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=2, reasoning_effort=effort)
        assert out.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=2, reasoning_effort="ultra")


def test_continuous_usage_stats_count_each_choice_alone(client):
    # vLLM: a chunk's usage is its own choice's tokens so far (previous_num_tokens[i]), not the sum.
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=3, n=2, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True},
                                            extra_body={"ignore_eos": True}, temperature=1.0, seed=3))
    seen = {0: 0, 1: 0}
    for c in chunks:
        if not c.choices:
            continue
        i = c.choices[0].index
        assert c.usage.completion_tokens > seen[i]
        seen[i] = c.usage.completion_tokens
        assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    assert seen == {0: 3, 1: 3}
    assert chunks[-1].usage.completion_tokens == 6  # the final usage chunk sums the choices


def test_continuous_usage_stats_count_each_chat_choice_alone(client):
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=3, n=2, stream=True, temperature=1.0, seed=3,
                                                 stream_options={"include_usage": True, "continuous_usage_stats": True},
                                                 extra_body={"ignore_eos": True}))
    last = {0: 0, 1: 0}
    for c in chunks:
        if c.choices:
            i = c.choices[0].index
            assert c.usage.completion_tokens >= last[i]
            last[i] = c.usage.completion_tokens
    assert last == {0: 3, 1: 3}
    assert chunks[-1].usage.completion_tokens == 6


def test_greedy_sampling_with_n_above_one_is_refused_as_vllm_refuses_it(client):
    with pytest.raises(openai.BadRequestError, match="n must be 1 when using greedy sampling"):
        client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, n=2, temperature=0)
    r = client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, n=2, temperature=0.7, seed=1)
    assert len(r.choices) == 2


def test_bodies_vllm_takes_are_taken_and_those_it_refuses_refused(server):
    """Field by field against vLLM 0.26's request classes and SamplingParams (each verdict read
    from its source): what it accepts is a 200 here too, what it refuses a 400."""
    def post(path, body):
        return httpx.post(server.url + path, json={"model": MODEL_NAME, "max_tokens": 2, **body}, timeout=60.0)

    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert post("/v1/chat/completions", {**chat, "top_logprobs": 0}).status_code == 200
    assert post("/v1/completions", {"prompt": "hi", "stream_options": {}}).status_code == 200
    assert post("/v1/completions", {"prompt": "hi", "stop_token_ids": [100000, -1]}).status_code == 200
    assert post("/v1/completions", {"prompt": "hi", "logit_bias": {"100": 200}}).status_code == 200
    assert post("/v1/completions", {"prompt": "hi", "thinking_token_budget": -1}).status_code == 200
    assert post("/v1/chat/completions", {"messages": [{"role": "narrator", "content": "x"},
                                                      {"role": "user", "content": "hi"}]}).status_code == 200
    r = post("/v1/completions", {"prompt": "hi", "temperature": 5})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"], r.text
