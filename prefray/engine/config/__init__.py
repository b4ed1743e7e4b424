"""The typed config: rules per key, validation before anything starts, the docs' key table.

`schema` holds the typed objects the engine runs with (`RunConfig`, `ModelSpec`, ...), each default
stated once; `validate` checks a composed config against them, one line per bad value.
"""

from prefray.engine.config.schema import BatchConfig, ModelSpec, RunConfig, TopConfig, build
from prefray.engine.config.validate import config_problems, sweep_problems

__all__ = ["BatchConfig", "ModelSpec", "RunConfig", "TopConfig", "build", "config_problems", "sweep_problems"]
