"""The package's exception. Bad arguments raise ValueError; everything else the engine reports
raises EngineError with the engine's message. A Python policy that fails is reported with
PolicyFallbackWarning."""

import traceback
import warnings


class EngineError(Exception):
    """An error reported by the engine: a model file it cannot read, an unknown optimizer, a
    failed step. ``code`` is the engine's error class: invalid_file, not_found, unsupported,
    resource_exhausted or internal (a Python policy's failure reported by an async engine:
    policy)."""

    def __init__(self, message: str, code: str = "internal"):
        super().__init__(message)
        self.code = code


def error_from(message: str, code: str) -> Exception:
    """The exception for an engine error reported as (message, code)."""
    return ValueError(message) if code == "invalid_argument" else EngineError(message, code)


class PolicyFallbackWarning(RuntimeWarning):
    """A Python policy raised or answered wrongly: that call got the baseline's decision and the
    engine disabled the policy (``get_optimizers()`` shows the fallback; ``set_optimizer(name,
    enabled=True)`` turns it back on)."""


def warn_policy_failure(message: str, cause) -> None:
    """Reports a Python policy's failure (message, the exception or None) after the step."""
    text = f"{message}; the policy is disabled and the baseline runs its slot"
    if cause is not None:
        text += "\n" + "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)).rstrip()
    warnings.warn(PolicyFallbackWarning(text), stacklevel=3)
