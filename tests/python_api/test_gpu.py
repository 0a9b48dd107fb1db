"""The package on the CUDA backend (run on a GPU machine: OPTIMATE_TEST_GPU=1; skipped in CI).

Greedy LLM.generate on the GPU equals `optimate serve --device cuda` for the same prompts (the
same backend through two front ends), and the engine reports the GPU backend."""

import os

import pytest

from optimate import LLM, SamplingParams

pytestmark = pytest.mark.skipif(os.environ.get("OPTIMATE_TEST_GPU") != "1",
                                reason="GPU test: set OPTIMATE_TEST_GPU=1 on a machine with a GPU")

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Water boils at"]


def test_gpu_generate_equals_the_gpu_server(model, optimate_bin, tmp_path):
    from test_generate_matches import completion, start_server

    llm = LLM(model, device="cuda", max_model_len=2048)
    assert llm.llm_engine.description.startswith("cuda")
    params = SamplingParams(temperature=0, max_tokens=32)
    outputs = llm.generate(PROMPTS * 20, params)  # a batch of 60
    with start_server(model, optimate_bin, tmp_path, "--device", "cuda", "--max-model-len", "2048") as url:
        for prompt, out in zip(PROMPTS, outputs):
            assert out.outputs[0].text == completion(url, prompt, 32)["text"], prompt
    for i, out in enumerate(outputs):
        assert out.outputs[0].text == outputs[i % len(PROMPTS)].outputs[0].text
