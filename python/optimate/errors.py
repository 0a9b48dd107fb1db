"""The package's exception. Bad arguments raise ValueError; everything else the engine reports
raises EngineError with the engine's message."""


class EngineError(Exception):
    """An error reported by the engine: a model file it cannot read, an unknown optimizer, a
    failed step, a Python policy that raised. ``code`` is the engine's error class:
    invalid_file, not_found, unsupported, resource_exhausted or internal (policy failures:
    policy)."""

    def __init__(self, message: str, code: str = "internal"):
        super().__init__(message)
        self.code = code


def error_from(message: str, code: str) -> Exception:
    """The exception for an engine error reported as (message, code)."""
    return ValueError(message) if code == "invalid_argument" else EngineError(message, code)
