"""One class per optimizer the engine registers, each a typed view of the registry's options.

The classes are made at import from the engine's registry (``_core.builtin_optimizers()``):
their keyword arguments are the options the optimizer reads, with its defaults, so an option
added in C++ appears here with no change. ``optimizers.pyi`` (generated at build time) gives
editors the signatures. Pass instances to ``create_optimized_engine(..., optimizers=[...])`` or
``engine.set_optimizer(...)``.

The seed's names work too: ``PrioritySchedulerOptimizer``, ``PredictiveBatchingOptimizer`` and
``DynamicKVCacheQuantOptimizer(quant_bits=8, activation_threshold=0.8, priority_aware=True)``
(the same optimizer as ``KvQuantOptimizer(bits=8, ...)``).
"""

from __future__ import annotations

from typing import Any

from optimate import _core

# The seed's names for the optimizers it describes; others are CamelCase(name) + "Optimizer".
_SEED_NAMES = {
    "priority": "PrioritySchedulerOptimizer",
    "predictive": "PredictiveBatchingOptimizer",
}

# Further names of the seed's for an optimizer that keeps its CamelCase class too:
# {registry name: [alias class names]}.
_SEED_ALIASES = {
    "kv_quant": ["DynamicKVCacheQuantOptimizer"],
}

# Option names the seed uses that the registry spells differently: {optimizer: {seed: registry}}.
_SEED_OPTIONS = {
    "predictive": {"max_wait_time_ms": "max_wait_ms"},
    "kv_quant": {"quant_bits": "bits"},
}


def class_name(registry_name: str) -> str:
    return _SEED_NAMES.get(registry_name) or (
        "".join(part.capitalize() for part in registry_name.replace("_", "-").split("-")) + "Optimizer")


def _type_name(value: Any) -> str:
    return type(value).__name__


def _accepts(default: Any, value: Any) -> bool:
    """Whether ``value`` has a type the option takes. The registry gives an option that is a
    number or a name (kv_quant's ``bits``: 8, 4 or "fp8") a string default, so strings take
    integers too; the engine checks the value itself."""
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default)
    if isinstance(default, float):
        return type(value) in (int, float)
    if isinstance(default, str):
        return type(value) in (str, int)
    return type(value) is type(default)


def _shown(default: Any) -> Any:
    """A default as users write it: "8" (a number or a name, kept as text) shows as 8."""
    if isinstance(default, str) and default.lstrip("-").isdigit():
        return int(default)
    return default


class Optimizer:
    """A built-in optimizer with the options given (the others keep their defaults).

    ``name`` is the registry name, ``defaults`` every option with its default, ``options`` those
    given. ``enabled=False`` configures it without running it (enable it later with
    ``engine.set_optimizer``). Options that depend on others follow them: the priority
    optimizer's per-level bounds are ``max_wait_ms_<level>`` for the levels it has (``low`` ...
    ``critical`` up to four, ``level0`` ... past four)."""

    name: str = ""
    description: str = ""
    defaults: dict[str, Any] = {}
    _registry_defaults: dict[str, Any] = {}  # as the registry gives them ("8" for bits)

    def __init__(self, *, enabled: bool = True, **options: Any) -> None:
        cls = type(self).__name__
        for seed_key, key in _SEED_OPTIONS.get(self.name, {}).items():
            if seed_key in options:
                if key in options:
                    raise ValueError(f"{cls}: give {key} or {seed_key}, not both")
                options[key] = options.pop(seed_key)
        for key, value in options.items():
            if type(value) not in (bool, int, float, str):
                raise ValueError(f"{cls}.{key} must be a bool, int, float or str, got {_type_name(value)}")
        for key, value in options.items():  # the options every instance has, checked here first
            raw = type(self)._registry_defaults.get(key)
            if key in type(self)._registry_defaults and not _accepts(raw, value):
                raise ValueError(f"{cls}.{key} must be {_type_name(_shown(raw))}, got {_type_name(value)}")
        # The options read with these (the per-level ones follow `levels`); ValueError for a bad value.
        known = dict(_core.optimizer_options(self.name, options))
        for key, value in options.items():
            if key not in known:
                raise ValueError(f"{cls} has no option {key!r} (options: {', '.join(known) or 'none'})")
            if not _accepts(known[key], value):
                raise ValueError(f"{cls}.{key} must be {_type_name(_shown(known[key]))}, got {_type_name(value)}")
        _core.check_optimizer(self.name, options)  # ValueError for an out-of-range value
        self.options: dict[str, Any] = dict(options)
        self.enabled = bool(enabled)
        self._defaults = {k: _shown(v) for k, v in known.items()}

    def __getattr__(self, key: str) -> Any:
        defaults = self.__dict__.get("_defaults") or type(self).defaults
        if key in defaults:
            return self.__dict__.get("options", {}).get(key, defaults[key])
        raise AttributeError(key)

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in self.options.items()]
        if not self.enabled:
            args.append("enabled=False")
        return f"{type(self).__name__}({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Optimizer) and other.name == self.name and other.options == self.options
                and other.enabled == self.enabled)

    def __hash__(self) -> int:
        return hash((self.name, self.enabled, tuple(sorted(self.options.items()))))


def builtin() -> dict[str, type]:
    """{registry name: class} for every optimizer the engine registers."""
    return dict(_BY_NAME)


def _make_class(class_name_: str, name: str, description: str, options: list, base: type = Optimizer) -> type:
    seed_options = _SEED_OPTIONS.get(name, {})
    doc = (f"{description}.\n\nOptions (default): " +
           (", ".join(f"{k}={_shown(v)!r}" for k, v in options) or "none") + "." +
           ("".join(f"\n``{seed}`` is the seed's name for ``{key}``." for seed, key in seed_options.items())))
    return type(class_name_, (base,), {
        "name": name, "description": description, "defaults": {k: _shown(v) for k, v in options},
        "_registry_defaults": dict(options),
        "__doc__": doc, "__module__": __name__})


_BY_NAME: dict[str, type] = {}
_ALIASES: dict[str, type] = {}
for _name, _description, _options in _core.builtin_optimizers():
    _cls = _make_class(class_name(_name), _name, _description, _options)
    globals()[_cls.__name__] = _cls
    _BY_NAME[_name] = _cls
    for _alias in _SEED_ALIASES.get(_name, []):
        _ALIASES[_alias] = _make_class(_alias, _name, _description, _options, base=_cls)
        globals()[_alias] = _ALIASES[_alias]

__all__ = ["Optimizer", "builtin", *(c.__name__ for c in _BY_NAME.values()), *_ALIASES]
