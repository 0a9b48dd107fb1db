"""LangChain's ChatOpenAI and LiteLLM's hosted_vllm/ provider against `optimate serve`, as their
users call them (both come from tests/live_server/requirements.txt)."""

import json
import os

import pytest
from pydantic import BaseModel, Field

from conftest import MODEL_NAME

# LiteLLM fetches a price list from the network on import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

langchain_openai = pytest.importorskip("langchain_openai")
litellm = pytest.importorskip("litellm")


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=150)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@pytest.fixture
def chat(server):
    return langchain_openai.ChatOpenAI(model=MODEL_NAME, base_url=server.url + "/v1", api_key="unused",
                                       temperature=0.0, max_tokens=24, max_retries=0, timeout=120)


def test_langchain_invoke_stream_batch(chat):
    whole = chat.invoke("Name a color.")
    assert whole.content
    streamed = "".join(chunk.content for chunk in chat.stream("Name a color."))
    assert streamed == whole.content
    answers = chat.batch(["Name a color.", "Name a fruit."])
    assert answers[0].content == whole.content and answers[1].content


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(chat, method):
    person = chat.bind(max_tokens=80).with_structured_output(Person, method=method).invoke(
        "Make up a person with a name and an age.")
    assert isinstance(person, Person)


def test_langchain_bind_tools(chat):
    forced = chat.bind(max_tokens=60).bind_tools([get_weather], tool_choice="get_weather")
    reply = forced.invoke("What is the weather in Paris?")
    assert reply.tool_calls and reply.tool_calls[0]["name"] == "get_weather"
    assert isinstance(reply.tool_calls[0]["args"].get("city"), str)


def test_litellm_hosted_vllm(server):
    kwargs = dict(model=f"hosted_vllm/{MODEL_NAME}", api_base=server.url + "/v1", api_key="unused",
                  messages=[{"role": "user", "content": "Name a color."}], max_tokens=12, temperature=0.0)
    r = litellm.completion(**kwargs)
    assert r.choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in litellm.completion(stream=True, **kwargs))
    assert streamed == r.choices[0].message.content
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 10}},
              "required": ["color"], "additionalProperties": False}
    structured = litellm.completion(**dict(kwargs, max_tokens=40), response_format={
        "type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    assert isinstance(json.loads(structured.choices[0].message.content)["color"], str)
