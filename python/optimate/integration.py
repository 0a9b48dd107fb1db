"""The seed's integration entry point: ``from optimate.integration import create_optimized_engine``."""

from optimate.engine import LLMEngine, create_optimized_engine

__all__ = ["create_optimized_engine", "LLMEngine"]
