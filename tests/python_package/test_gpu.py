"""The package on the CUDA backend (run on a GPU machine: OPTIMATE_TEST_GPU=1; skipped in CI).

Greedy LLM.generate on the GPU equals `optimate serve --device cuda` for the same prompts (the
same backend through two front ends), and a large batch runs."""

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
    # One at a time, as the server gets them: the same kernels (batch size changes the GEMM path).
    single = [llm.generate([p], params)[0].outputs[0].text for p in PROMPTS]
    with start_server(model, optimate_bin, tmp_path, "--device", "cuda", "--max-model-len", "2048") as url:
        for prompt, text in zip(PROMPTS, single):
            assert text == completion(url, prompt, 32)["text"], prompt
    # A batch of 60: identical prompts in one batch give identical text.
    batch = llm.generate(PROMPTS * 20, params)
    for i, out in enumerate(batch):
        assert out.outputs[0].text == batch[i % len(PROMPTS)].outputs[0].text
