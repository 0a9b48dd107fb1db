"""500 concurrent streaming clients over loopback: every one completes, nothing leaks."""

import asyncio
import time

import httpx
import openai

from conftest import MODEL_NAME

NUM_CLIENTS = 500
MAX_TOKENS = 4


def test_500_concurrent_streaming_clients(server):
    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[int, str]:
        stream = await client.completions.create(
            model=MODEL_NAME, prompt=f"Request {i}: hello", max_tokens=MAX_TOKENS, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}, temperature=0.0)
        text, usage, finish = "", None, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].text
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        assert finish == "length"
        return usage.completion_tokens, text

    async def run() -> list:
        http_client = openai.DefaultAsyncHttpxClient(limits=httpx.Limits(max_connections=NUM_CLIENTS + 10))
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300.0,
                                    http_client=http_client)
        async with client:
            return await asyncio.wait_for(
                asyncio.gather(*(one(client, i) for i in range(NUM_CLIENTS)), return_exceptions=True), timeout=300)

    before = server.metric("vllm:request_success_total")
    start = time.monotonic()
    results = asyncio.run(run())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {NUM_CLIENTS} clients failed, first: {errors[0]!r}"
    assert all(tokens == MAX_TOKENS for tokens, _ in results)
    print(f"{NUM_CLIENTS} streams in {time.monotonic() - start:.1f}s")
    server.wait_idle(timeout_s=30)
    assert server.metric("vllm:request_success_total") - before == NUM_CLIENTS
