"""One class per optimizer the engine registers, each a typed view of the registry's options.

The classes are made at import from the engine's registry (``_core.builtin_optimizers()``):
their keyword arguments are the options the optimizer reads, with its defaults, so an option
added in C++ appears here with no change. ``optimizers.pyi`` (generated at build time) gives
editors the signatures. Pass instances to ``create_optimized_engine(..., optimizers=[...])`` or
``engine.set_optimizer(...)``.
"""

from __future__ import annotations

from typing import Any

from optimate import _core

# The seed's names for the optimizers it describes; others are CamelCase(name) + "Optimizer".
_SEED_NAMES = {
    "priority": "PrioritySchedulerOptimizer",
    "predictive": "PredictiveBatchingOptimizer",
}


# Option names the seed uses that the registry spells differently: {optimizer: {seed: registry}}.
_SEED_OPTIONS = {
    "predictive": {"max_wait_time_ms": "max_wait_ms"},
}


def class_name(registry_name: str) -> str:
    return _SEED_NAMES.get(registry_name) or (
        "".join(part.capitalize() for part in registry_name.replace("_", "-").split("-")) + "Optimizer")


def _type_name(value: Any) -> str:
    return type(value).__name__


class Optimizer:
    """A built-in optimizer with the options given (the others keep their defaults).

    ``name`` is the registry name, ``defaults`` every option with its default, ``options`` those
    given. ``enabled=False`` configures it without running it (enable it later with
    ``engine.set_optimizer``)."""

    name: str = ""
    description: str = ""
    defaults: dict[str, Any] = {}

    def __init__(self, *, enabled: bool = True, **options: Any) -> None:
        for seed_key, key in _SEED_OPTIONS.get(self.name, {}).items():
            if seed_key in options:
                if key in options:
                    raise ValueError(f"{type(self).__name__}: give {key} or {seed_key}, not both")
                options[key] = options.pop(seed_key)
        for key, value in options.items():
            if key not in self.defaults:
                raise ValueError(f"{type(self).__name__} has no option {key!r} "
                                f"(options: {', '.join(self.defaults) or 'none'})")
            default = self.defaults[key]
            ok = type(value) is type(default) or (isinstance(default, float) and type(value) is int)
            if not ok:
                raise ValueError(f"{type(self).__name__}.{key} must be {_type_name(default)}, "
                                f"got {_type_name(value)}")
        _core.check_optimizer(self.name, options)  # ValueError for an out-of-range value
        self.options: dict[str, Any] = dict(options)
        self.enabled = bool(enabled)

    def __getattr__(self, key: str) -> Any:
        defaults = type(self).defaults
        if key in defaults:
            return self.__dict__.get("options", {}).get(key, defaults[key])
        raise AttributeError(key)

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in self.options.items()]
        if not self.enabled:
            args.append("enabled=False")
        return f"{type(self).__name__}({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and other.options == self.options  # type: ignore[attr-defined]
                and other.enabled == self.enabled)  # type: ignore[attr-defined]


def builtin() -> dict[str, type]:
    """{registry name: class} for every optimizer the engine registers."""
    return dict(_BY_NAME)


_BY_NAME: dict[str, type] = {}
for _name, _description, _options in _core.builtin_optimizers():
    _cls = type(class_name(_name), (Optimizer,), {
        "name": _name, "description": _description, "defaults": dict(_options),
        "__doc__": f"{_description}.\n\nOptions (default): " +
                   (", ".join(f"{k}={v!r}" for k, v in _options) or "none") + ".",
        "__module__": __name__})
    globals()[_cls.__name__] = _cls
    _BY_NAME[_name] = _cls

__all__ = ["Optimizer", "builtin", *(c.__name__ for c in _BY_NAME.values())]
