"""EngineArgs: the engine's settings as a dataclass, one field per setting.

The fields are not written here: they come from the engine (``_core.engine_settings()``), the
same list the command line (``optimate serve --help``) and the TOML file (``[engine]``) take, so
every setting has one name, type and default everywhere. ``engine_args.pyi`` (generated at build
time from the same list) gives editors the fields.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from optimate import _core

_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


def _settings(self) -> dict[str, Any]:
    """The engine settings as {name: value}."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# "org/name": what a Hugging Face Hub id looks like (no file extension, one slash).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_not_hub_id(model: str) -> None:
    """Optimate loads local files; a Hub id that is not a local path gets how to fetch it."""
    if not _HUB_ID.fullmatch(model) or os.path.exists(model) or os.path.splitext(model)[1] in (".gguf", ".json"):
        return
    local = "models/" + model.split("/")[1]
    raise ValueError(
        f"EngineArgs.model '{model}' is not a local file or folder. Optimate loads local model files only (a GGUF "
        f"file, or a Hugging Face folder with config.json and *.safetensors) and downloads nothing. For the Hugging "
        f"Face Hub model '{model}', download it first: `huggingface-cli download {model} --local-dir {local}` (or "
        f"`huggingface_hub.snapshot_download('{model}', local_dir='{local}')`), then pass model='{local}'.")


def _post_init(self) -> None:
    for f in dataclasses.fields(self):
        value = getattr(self, f.name)
        expected = _TYPES[f.metadata["type"]]
        if expected is str and isinstance(value, os.PathLike):
            value = os.fspath(value)
            setattr(self, f.name, value)
        ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if f.name == "kv_cache_memory" and isinstance(value, str):
            ok = True  # a size: "4GiB"
        if not ok:
            raise ValueError(f"EngineArgs.{f.name} must be {f.metadata['type']}, got {type(value).__name__}")
    _check_not_hub_id(self.model)
    _core.check_engine_settings(self.engine_settings())


def _make_engine_args() -> type:
    fields = []
    for name, type_name, default, flag, help_text in _core.engine_settings():
        meta = {"type": type_name, "flag": flag, "help": help_text}
        fields.append((name, _TYPES[type_name], dataclasses.field(default=default, metadata=meta)))
    doc = ("The engine's settings (the flags of `optimate serve`, the keys of [engine] in its TOML "
           "file), checked on construction: ValueError names the bad setting.\n\nFields:\n" +
           "\n".join(f"  {f[0]}: {f[2].metadata['help']}" for f in fields))
    return dataclasses.make_dataclass(
        "EngineArgs", fields, namespace={"__post_init__": _post_init, "engine_settings": _settings,
                                         "__doc__": doc, "__module__": __name__})


EngineArgs = _make_engine_args()
