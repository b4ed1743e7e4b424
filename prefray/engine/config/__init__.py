"""The typed config schema: rules per key, validation before anything starts, the README key table."""

from prefray.engine.config.schema import ModelConfig, RunConfig, TopConfig
from prefray.engine.config.validate import config_problems, sweep_problems, typed

__all__ = ["ModelConfig", "RunConfig", "TopConfig", "config_problems", "sweep_problems", "typed"]
