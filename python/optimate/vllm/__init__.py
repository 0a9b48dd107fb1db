"""Optimate's scheduling optimizers inside vLLM (``pip install optimate[vllm]``; docs/vllm.md).

    vllm serve MODEL --scheduler-cls optimate.vllm.Scheduler \\
        --additional-config '{"optimate": {"optimizers": {"priority": {}}}}'

The policies are Optimate's C++ policies (optimate._core), run by vLLM's own v1 scheduler
through its scheduler-class setting; ``VLLM_PLUGINS=optimate`` adds the run-time API
(``/v1/optimizers``) and the optimate:* series on vLLM's ``/metrics``. Supported: vLLM 0.26.x.
"""

from optimate.vllm.version import SUPPORTED, check_vllm_version


def __getattr__(name):
    # vLLM is imported only when its scheduler is asked for.
    if name in ("Scheduler", "AsyncOptimizedScheduler"):
        from optimate.vllm import scheduler

        return getattr(scheduler, name)
    raise AttributeError(name)


__all__ = ["Scheduler", "SUPPORTED", "check_vllm_version"]
