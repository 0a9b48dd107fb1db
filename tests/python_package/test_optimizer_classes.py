"""Every optimizer class the package makes, the seed's names for them, and the options that
follow other options (the priority optimizer's per-level bounds)."""

import pytest

from conftest import run_to_completion, small_args
from optimate import EngineArgs, SamplingParams, create_optimized_engine, optimizers
from optimate.optimizers import (AdaptiveOptimizer, DynamicKVCacheQuantOptimizer, KvQuantOptimizer,
                                 PredictiveBatchingOptimizer, PrioritySchedulerOptimizer)
from optimate.schedulers import PriorityScheduler


def listed(engine):
    return {o["name"]: o for o in engine.get_optimizers()}


@pytest.mark.parametrize("name", sorted(optimizers.builtin()))
def test_every_registered_optimizer_runs_an_engine(model, name):
    cls = optimizers.builtin()[name]
    assert cls.name == name and cls.description
    opt = cls()
    assert opt.options == {} and opt.enabled
    engine = create_optimized_engine(small_args(model), optimizers=[opt])
    entry = listed(engine)[name]
    assert entry["enabled"] and not entry["baseline"]
    engine.add_request("a", "The capital of France is", SamplingParams(temperature=0, max_tokens=4))
    outputs = [o for o in run_to_completion(engine) if o.finished]
    assert len(outputs) == 1 and len(outputs[0].outputs[0].token_ids) == 4


def test_kv_quant_takes_bits_as_a_number_or_a_name(model):
    seed = KvQuantOptimizer(bits=8, activation_threshold=0.8, priority_aware=True)
    assert seed.bits == 8 and seed.activation_threshold == 0.8 and seed.priority_aware is True
    assert KvQuantOptimizer().bits == 8  # the default, as users write it
    assert KvQuantOptimizer(bits="fp8").bits == "fp8"
    assert KvQuantOptimizer(bits=4).bits == 4
    for bad in (3, "int3"):
        with pytest.raises(ValueError, match="bits"):
            KvQuantOptimizer(bits=bad)
    with pytest.raises(ValueError, match="bits must be int, got float"):
        KvQuantOptimizer(bits=8.0)


def test_the_seeds_dynamic_kv_cache_quant_optimizer_is_kv_quant(model):
    seed = DynamicKVCacheQuantOptimizer(quant_bits=8, activation_threshold=0.8, priority_aware=True)
    assert seed.name == "kv_quant" and isinstance(seed, KvQuantOptimizer)
    assert seed == KvQuantOptimizer(bits=8, activation_threshold=0.8, priority_aware=True)
    assert seed.bits == 8
    with pytest.raises(ValueError, match="give bits or quant_bits, not both"):
        DynamicKVCacheQuantOptimizer(quant_bits=8, bits=8)
    # On a cache too small for four long requests, low-priority blocks are stored in int8 and
    # the important request is kept at full precision.
    engine = create_optimized_engine(
        small_args(model, kv_cache_memory="8MiB", max_model_len=256),
        optimizers=[DynamicKVCacheQuantOptimizer(quant_bits=8, activation_threshold=0.3, priority_aware=True)])
    prompt = "Write a long story about the sea. " * 8
    for i in range(4):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True),
                           priority=2 if i == 0 else 0)
    outputs = [o for o in run_to_completion(engine) if o.finished]
    assert sorted(o.request_id for o in outputs) == ["0", "1", "2", "3"]
    counters = listed(engine)["kv_quant"]["counters"]
    assert counters["activations"] >= 1, counters
    assert counters["requantize_orders"] > 0, counters


@pytest.mark.parametrize("levels, names", [
    (6, ["max_wait_ms_level0", "max_wait_ms_level5"]),
    (3, ["max_wait_ms_low", "max_wait_ms_high"]),
    (1, ["max_wait_ms_all"]),
])
def test_priority_per_level_options_follow_levels(model, levels, names):
    opts = {name: 1000.0 + i for i, name in enumerate(names)}
    priority = PrioritySchedulerOptimizer(levels=levels, **opts)
    for name, value in opts.items():
        assert getattr(priority, name) == value
    engine = create_optimized_engine(small_args(model), optimizers=[priority])
    entry = listed(engine)["priority"]
    assert entry["enabled"] and entry["options"]["levels"] == levels


def test_priority_refuses_a_bound_for_a_level_it_does_not_have():
    with pytest.raises(ValueError, match="no option 'max_wait_ms_low'.*max_wait_ms_level0"):
        PrioritySchedulerOptimizer(levels=6, max_wait_ms_low=1000.0)
    with pytest.raises(ValueError, match="no option 'max_wait_ms_level7'"):
        PrioritySchedulerOptimizer(levels=6, max_wait_ms_level7=1000.0)
    with pytest.raises(ValueError, match="max_wait_ms_level2 must be a number"):
        PrioritySchedulerOptimizer(levels=6, max_wait_ms_level2="soon")


def test_adaptive_optimizer_ticks_on_the_engine_clock(model):
    adaptive = AdaptiveOptimizer(ttft_p99_ms=500.0, interval_ms=1.0, window_ms=1000.0)
    assert adaptive.ttft_p99_ms == 500.0 and adaptive.kv_quota is True
    engine = create_optimized_engine(small_args(model), optimizers=[adaptive])
    for i in range(3):
        engine.add_request(str(i), "Hello", SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    run_to_completion(engine)
    counters = listed(engine)["adaptive"]["counters"]
    assert counters["ticks"] >= 1, counters
    with pytest.raises(ValueError, match="ttft_p99_ms"):
        AdaptiveOptimizer(ttft_p99_ms=-5.0)


def test_predictive_takes_the_seeds_option_name():
    assert PredictiveBatchingOptimizer(max_wait_time_ms=20).max_wait_ms == 20
    assert PredictiveBatchingOptimizer(max_wait_time_ms=20) == PredictiveBatchingOptimizer(max_wait_ms=20)


def test_the_seeds_priority_scheduler_in_a_dict_of_engine_arguments(model):
    scheduler = PriorityScheduler(levels=3)
    assert isinstance(scheduler, PrioritySchedulerOptimizer) and scheduler.name == "priority"
    settings = dict(model=model, device="cpu", kv_cache_memory="256MiB", max_model_len=2048,
                    scheduler=scheduler, max_num_seqs=1)
    engine = create_optimized_engine(settings)
    assert listed(engine)["priority"]["options"] == {"levels": 3}
    assert engine.engine_args.max_num_seqs == 1
    # With one sequence slot, the important request that arrives last runs first.
    for i, p in enumerate([0, 0, 2]):
        engine.add_request(str(i), "Hello", SamplingParams(temperature=0, max_tokens=2, ignore_eos=True), priority=p)
    finished = [o.request_id for o in run_to_completion(engine) if o.finished]
    assert finished.index("2") < finished.index("1"), finished


def test_a_hugging_face_hub_id_says_optimate_loads_local_files():
    with pytest.raises(ValueError) as e:
        EngineArgs(model="meta-llama/Llama-2-7b-chat-hf")
    message = str(e.value)
    assert "local" in message
    assert "huggingface-cli download meta-llama/Llama-2-7b-chat-hf --local-dir models/Llama-2-7b-chat-hf" in message
    # A missing local file is not mistaken for a Hub id: the engine names it when it opens it.
    EngineArgs(model="models/absent.gguf")
