"""Fixtures for the Python package's tests: the embedded model and small engines.

The package is imported from the build tree (run.sh puts OPTIMATE_BUILD_DIR/python on
PYTHONPATH) or from an installed wheel. OPTIMATE_MODEL names the model (default: the embedded
SmolLM2-135M-Instruct Q4_1 GGUF) and OPTIMATE_BIN the `optimate` binary the output is compared
with.
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _resolve(env: str, default: str) -> Path:
    path = Path(os.environ.get(env, default))
    return path if path.is_absolute() else ROOT / path


MODEL = _resolve("OPTIMATE_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = _resolve("OPTIMATE_BIN", "build/optimate")


@pytest.fixture(scope="session")
def model() -> str:
    if not MODEL.exists():
        pytest.fail(f"{MODEL} not found: run scripts/setup.sh or set OPTIMATE_MODEL")
    return str(MODEL)


@pytest.fixture(scope="session")
def optimate_bin() -> Path:
    if not BIN.exists():
        pytest.fail(f"{BIN} not found: build the `optimate` target or set OPTIMATE_BIN")
    return BIN


def small_args(model: str, **overrides):
    """EngineArgs for tests: the CPU backend, a 256 MiB KV cache and a 2048-token context."""
    from optimate import EngineArgs

    settings = dict(model=model, device="cpu", kv_cache_memory="256MiB", max_model_len=2048, seed=7)
    settings.update(overrides)
    return EngineArgs(**settings)


def run_to_completion(engine, max_steps: int = 10_000):
    """Steps until nothing is left; returns every output, in order."""
    outputs = []
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return outputs
        outputs.extend(engine.step())
    raise AssertionError(f"requests still unfinished after {max_steps} steps")
