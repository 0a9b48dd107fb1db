"""The plugin's configuration as vLLM hands it over (--additional-config is read with json.loads,
which takes NaN): each bad value is a ValueError naming it, and an entry without optimizers runs
the defaults as no entry does."""

import math

import pytest

from optimate.vllm.config import DEFAULT_OPTIMIZERS, parse_config


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, "100", True])
def test_a_watchdog_that_is_not_a_finite_number_is_refused(value):
    with pytest.raises(ValueError, match="watchdog_ms"):
        parse_config({"watchdog_ms": value})


def test_a_negative_watchdog_in_the_file_is_refused(tmp_path):
    path = tmp_path / "optimate.toml"
    path.write_text("[engine]\noptimizer_watchdog_ms = -5\n\n[optimizers.priority]\n")
    with pytest.raises(ValueError, match="watchdog"):
        parse_config({"config": str(path)})


@pytest.mark.parametrize("entry", [{}, {"watchdog_ms": 100}])
def test_an_entry_without_optimizers_runs_the_defaults(entry):
    config = parse_config(entry)
    assert [name for name, _, enabled in config.optimizers if enabled] == list(DEFAULT_OPTIMIZERS)
    assert parse_config({"optimizers": {}}).optimizers == []  # an explicit empty table: none
