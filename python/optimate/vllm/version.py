"""The vLLM versions the plugin is built and tested against.

It reaches into vLLM's v1 scheduler (its queues, its preemption, its running list), which vLLM
does not promise to keep stable between versions, so it refuses to start on a version it was
not tested with. OPTIMATE_VLLM_ALLOW_UNTESTED=1 starts it anyway.
"""

from __future__ import annotations

import os

#: Inclusive lower, exclusive upper bound: the 0.26 series.
SUPPORTED = ((0, 26), (0, 27))
ENV_ALLOW = "OPTIMATE_VLLM_ALLOW_UNTESTED"


def _release(version: str) -> tuple:
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_vllm_version(version: str | None = None, env=os.environ) -> None:
    if version is None:
        import vllm
        version = vllm.__version__
    low, high = SUPPORTED
    if low <= _release(version) < high or env.get(ENV_ALLOW) == "1":
        return
    raise RuntimeError(f"optimate.vllm supports vLLM {low[0]}.{low[1]}.x (this is vLLM {version}); "
                       f"set {ENV_ALLOW}=1 to start it on this version anyway")
