"""The plugin's configuration: Optimate's `[optimizers.NAME]` tables, from vLLM's
``--additional-config`` or from a TOML file in ``optimate serve``'s format.

    vllm serve MODEL --scheduler-cls optimate.vllm.Scheduler \\
        --additional-config '{"optimate": {"optimizers": {"priority": {"levels": 2}}}}'
    vllm serve MODEL --scheduler-cls optimate.vllm.Scheduler \\
        --additional-config '{"optimate": {"config": "/etc/optimate.toml"}}'

The ``optimate`` entry takes ``optimizers`` (a table per optimizer, the same keys as the TOML
tables, ``enabled = false`` to configure one without running it), ``config`` (a TOML file; its
``[optimizers.*]`` tables come first, ``optimizers`` here override them by name) and
``watchdog_ms`` (the guard's bound on one policy call, as ``--optimizer-watchdog-ms``). Without
an ``optimate`` entry the file named by ``OPTIMATE_VLLM_CONFIG`` is read, and without that (or
with an entry that names neither ``optimizers`` nor ``config``) the ``priority`` optimizer runs
with its defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any, Mapping

from optimate import _core

logger = logging.getLogger("optimate.vllm")

#: The optimizers that run when nothing is configured.
DEFAULT_OPTIMIZERS = ("priority",)
#: The optimizers the plugin can run: the scheduling ones. kv_quant and the sampler baselines
#: need the engine's own KV cache and sampler (docs/vllm.md says why).
SUPPORTED_OPTIMIZERS = ("priority", "predictive", "adaptive", "fcfs", "launch-at-once", "recompute-newest")
ENV_CONFIG = "OPTIMATE_VLLM_CONFIG"
_KEYS = ("optimizers", "config", "watchdog_ms")


@dataclasses.dataclass
class PluginConfig:
    optimizers: list  # [(name, options, enabled)]
    watchdog_ms: float = 250.0
    source: str = "defaults"


def _read_file(path: str) -> tuple[list, float]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"optimate: cannot read the configuration file {path}: {e.strerror}") from e
    specs, watchdog_ms, other = _core.read_optimizer_config(text, path)
    _check_watchdog(watchdog_ms, f"{path}: optimizer_watchdog_ms")
    if other:
        logger.warning("optimate: %s sets [engine] keys that do not apply inside vLLM (use vLLM's own flags): %s",
                       path, ", ".join(other))
    return list(specs), watchdog_ms


def _check_watchdog(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"optimate: {what} must be a finite number >= 0 (0: off), got {value!r}")


def _table_spec(name: str, table: Any) -> tuple:
    if not isinstance(table, Mapping):
        raise ValueError(f"optimate: optimizers.{name} must be a table of options, got {type(table).__name__}")
    options = dict(table)
    enabled = options.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"optimate: optimizers.{name}.enabled must be true or false")
    for key, value in options.items():
        if not isinstance(value, (bool, int, float, str)):
            raise ValueError(f"optimate: optimizers.{name}.{key} must be a bool, number or string, "
                             f"got {type(value).__name__}")
    return (name, options, enabled)


def parse_config(entry: Any, env: Mapping[str, str] = os.environ) -> PluginConfig:
    """The configuration from the ``optimate`` entry of vLLM's additional config (None when
    absent). ValueError names the first bad key or option."""
    if entry is None:
        path = env.get(ENV_CONFIG)
        if path:
            specs, watchdog_ms = _read_file(path)
            config = PluginConfig(specs, watchdog_ms, path)
        else:
            config = PluginConfig([(name, {}, True) for name in DEFAULT_OPTIMIZERS])
    else:
        if not isinstance(entry, Mapping):
            raise ValueError(f"optimate: the additional config's 'optimate' entry must be an object, "
                             f"got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise ValueError(f"optimate: unknown key(s) {', '.join(unknown)} (known: {', '.join(_KEYS)})")
        specs, watchdog_ms, source = [], 250.0, "--additional-config"
        if "config" not in entry and "optimizers" not in entry:  # only watchdog_ms (or nothing)
            specs = [(name, {}, True) for name in DEFAULT_OPTIMIZERS]
        if "config" in entry:
            specs, watchdog_ms = _read_file(str(entry["config"]))
            source = str(entry["config"])
        tables = entry.get("optimizers", {})
        if not isinstance(tables, Mapping):
            raise ValueError("optimate: optimizers must be an object of {name: {option: value}}")
        for name, table in tables.items():
            specs = [s for s in specs if s[0] != name] + [_table_spec(name, table)]
        if "watchdog_ms" in entry:
            watchdog_ms = entry["watchdog_ms"]
            _check_watchdog(watchdog_ms, "watchdog_ms")
        config = PluginConfig(specs, float(watchdog_ms), source)
    check_optimizers(config.optimizers)
    return config


def check_optimizers(specs: list) -> None:
    """ValueError for an optimizer the plugin cannot run or an option it does not take."""
    for name, options, _ in specs:
        if name not in SUPPORTED_OPTIMIZERS:
            known = ", ".join(SUPPORTED_OPTIMIZERS)
            raise ValueError(f"optimate: the optimizer '{name}' does not run inside vLLM (these do: {known})")
        _core.check_optimizer(name, options)
