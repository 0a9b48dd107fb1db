"""vLLM's v1 scheduler driven directly, as vLLM's own tests/v1/core/test_scheduler.py does (its
create_scheduler helper): a mock KV-cache configuration of a few blocks, no model and no GPU.
The model runner is replaced by `step()`, which answers every scheduled request that completes
its prompt or decode with one sampled token.

Time is a fake clock: the requests' arrival times, the views' clock and the guard's clock
(optimate.vllm.scheduler.OptimizersMixin.clock_ns / guard_clock_ns).
"""

import functools
import json
from pathlib import Path

import pytest
import torch

from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from optimate.vllm import scheduler as plugin

BLOCK_SIZE = 16
EOS = 2
_TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
               "rms_norm_eps": 1e-5, "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": EOS}


class FakeClock:
    def __init__(self, start_s: float = 1_000_000.0):
        self.ns = int(start_s * 1e9)

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += int(ms * 1e6)

    @property
    def s(self) -> float:
        return self.ns * 1e-9


def write_tiny_model(folder: Path) -> str:
    """A model folder vLLM configures from: the config of a tiny Llama (no weights)."""
    (folder / "config.json").write_text(json.dumps(_TINY_LLAMA))
    return str(folder)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> str:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(plugin.OptimizersMixin, "clock_ns", staticmethod(c))
    return c


def build_scheduler(model_dir: str, optimate=None, *, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=512,
                    policy="fcfs", cls=plugin.Scheduler, async_scheduling=False, prefix_caching=False,
                    max_model_len=1024):
    """A scheduler of class `cls` over a mock KV cache of `num_blocks` blocks; `optimate` is the
    additional config's "optimate" entry (None: none)."""
    sc = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                         max_model_len=max_model_len, enable_chunked_prefill=True, is_encoder_decoder=False,
                         policy=policy, async_scheduling=async_scheduling)
    mc = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float16", seed=0,
                     max_model_len=max_model_len)
    cc = CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=prefix_caching)
    extra = {} if optimate is None else {"optimate": optimate}
    vc = VllmConfig(scheduler_config=sc, model_config=mc, cache_config=cc, device_config=DeviceConfig("cpu"),
                    additional_config=extra)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    cc.num_gpu_blocks = num_blocks
    return cls(vllm_config=vc, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(vc),
               block_size=BLOCK_SIZE, log_stats=True)


@pytest.fixture
def make(model_dir, clock):
    """make(optimate=..., num_blocks=..., max_num_seqs=..., policy=..., cls=...) -> a scheduler."""
    return functools.partial(build_scheduler, model_dir)


_hasher = None


def request(request_id: str, *, prompt_len: int = 16, max_tokens: int = 4, priority: int = 0,
            arrival_s: float = 0.0, prompt_token_ids: list[int] | None = None) -> Request:
    """A request of `prompt_len` copies of one token (requests whose ids have the same length
    share their prompt, and so their cached prefix), or of `prompt_token_ids`."""
    global _hasher
    if _hasher is None:
        init_none_hash(sha256)  # vLLM's default prefix-caching hash
        _hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Request(request_id=request_id, prompt_token_ids=prompt_token_ids or [10 + len(request_id)] * prompt_len,
                   sampling_params=params, pooling_params=None, arrival_time=arrival_s, priority=priority,
                   block_hasher=_hasher)


class Driver:
    """Steps a scheduler with a fake model runner and records what happened."""

    def __init__(self, scheduler, clock: FakeClock, step_ms: float = 10.0):
        self.s = scheduler
        self.clock = clock
        self.step_ms = step_ms
        self.admitted: list[str] = []   # first admissions, in order
        self.finished: list[str] = []
        self.preempted: list[str] = []
        self._seen: set[str] = set()

    def add(self, *requests: Request) -> None:
        for r in requests:
            if r.arrival_time == 0.0:
                r.arrival_time = self.clock.s
            self.s.add_request(r)

    def step(self):
        out = self.s.schedule()
        self.preempted += sorted(out.preempted_req_ids)
        for rid in out.num_scheduled_tokens:
            if rid not in self._seen:
                self._seen.add(rid)
                self.admitted.append(rid)
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            r = self.s.requests[rid]
            done = r.num_computed_tokens >= r.num_tokens  # the scheduler already advanced it
            sampled.append([7] if done else [])
        runner = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                   sampled_token_ids=sampled)
        self.clock.advance_ms(self.step_ms)
        outputs = self.s.update_from_output(out, runner)
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    self.finished.append(o.request_id)
        return out

    def run(self, max_steps: int = 500) -> None:
        for _ in range(max_steps):
            if not self.s.has_requests():
                return
            self.step()
        raise AssertionError(f"requests left after {max_steps} steps: {list(self.s.requests)}")

    def assert_all_returned(self, num_blocks: int) -> None:
        """Every request finished and every KV block is back in the pool."""
        assert not self.s.requests and not self.s.running and not self.s.waiting
        assert self.s.kv_cache_manager.block_pool.get_num_free_blocks() == num_blocks - 1  # one null block


@pytest.fixture
def driver(clock):
    return lambda scheduler, **kw: Driver(scheduler, clock, **kw)


__all__ = ["VllmScheduler", "request", "Driver", "BLOCK_SIZE"]
