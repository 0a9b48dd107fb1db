"""Writes engine_args.pyi and optimizers.pyi for the classes the package makes at import, from
the engine's settings and optimizer registry (run at build time: python -m optimate._stubs DIR)."""

import dataclasses
import sys
from pathlib import Path

from optimate import optimizers
from optimate.engine_args import EngineArgs

_HEADER = "# Generated at build time by optimate._stubs from the engine's tables; do not edit.\n"


def engine_args_stub() -> str:
    lines = [_HEADER, "from typing import Any\n", "", "class EngineArgs:"]
    params = []
    for f in dataclasses.fields(EngineArgs):
        typ = f.type.__name__ if isinstance(f.type, type) else str(f.type)
        if f.name == "kv_cache_memory":
            typ = "int | str"
        lines.append(f"    {f.name}: {typ}")
        lines.append(f'    """{f.metadata["help"]}"""')
        params.append(f"{f.name}: {typ} = {f.default!r}")
    lines.append(f"    def __init__(self, {', '.join(params)}) -> None: ...")
    lines.append("    def engine_settings(self) -> dict[str, Any]: ...")
    return "\n".join(lines) + "\n"


def optimizers_stub() -> str:
    lines = [_HEADER, "from typing import Any\n", "",
             "class Optimizer:",
             "    name: str", "    description: str", "    defaults: dict[str, Any]",
             "    options: dict[str, Any]", "    enabled: bool",
             "    def __init__(self, *, enabled: bool = True, **options: Any) -> None: ...",
             "", "def builtin() -> dict[str, type[Optimizer]]: ...", ""]
    classes = [(cls, "Optimizer") for cls in optimizers.builtin().values()]
    classes += [(alias, alias.__mro__[1].__name__) for alias in optimizers._ALIASES.values()]
    for cls, base in classes:
        def typ(key: str) -> str:
            # An option that is a number or a name (kv_quant's bits: 8, 4 or "fp8").
            return "int | str" if key in _number_or_name(cls) else type(cls.defaults[key]).__name__
        params = [f"{k}: {typ(k)} = {v!r}" for k, v in cls.defaults.items()]
        params += [f"{seed}: {typ(key)} | None = None"
                   for seed, key in optimizers._SEED_OPTIONS.get(cls.name, {}).items()]
        params.append("enabled: bool = True")
        lines.append(f"class {cls.__name__}({base}):")
        lines.append(f'    """{cls.description}."""')
        for k in cls.defaults:
            lines.append(f"    {k}: {typ(k)}")
        lines.append(f"    def __init__(self, *, {', '.join(params)}, **level_options: float) -> None: ..."
                     if cls.name == "priority" else f"    def __init__(self, *, {', '.join(params)}) -> None: ...")
        lines.append("")
    return "\n".join(lines)


def _number_or_name(cls) -> set[str]:
    from optimate import _core

    return {k for k, v in _core.optimizer_options(cls.name, {}) if isinstance(v, str)}


def main(out_dir: str) -> None:
    out = Path(out_dir)
    (out / "engine_args.pyi").write_text(engine_args_stub())
    (out / "optimizers.pyi").write_text(optimizers_stub())


if __name__ == "__main__":
    main(sys.argv[1])
