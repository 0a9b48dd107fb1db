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
    for name, cls in optimizers.builtin().items():
        params = [f"{k}: {type(v).__name__} = {v!r}" for k, v in cls.defaults.items()]
        params += [f"{seed}: {type(cls.defaults[key]).__name__} | None = None"
                   for seed, key in optimizers._SEED_OPTIONS.get(name, {}).items()]
        params.append("enabled: bool = True")
        lines.append(f"class {cls.__name__}(Optimizer):")
        lines.append(f'    """{cls.description}."""')
        for k, v in cls.defaults.items():
            lines.append(f"    {k}: {type(v).__name__}")
        lines.append(f"    def __init__(self, *, {', '.join(params)}) -> None: ...")
        lines.append("")
    return "\n".join(lines)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    (out / "engine_args.pyi").write_text(engine_args_stub())
    (out / "optimizers.pyi").write_text(optimizers_stub())


if __name__ == "__main__":
    main(sys.argv[1])
