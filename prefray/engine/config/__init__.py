"""The typed config: the objects the engine runs with and the rules each key is checked by.

`schema` holds the typed objects (`RunConfig`, `ModelSpec`, ...), each default stated once; `rules`
the checks of one value. Checking a composed config against them (`prefray.app.validate`), composing
a sweep and the docs' key table are the commands' work, in `prefray/app/`.
"""

from prefray.engine.config.schema import BatchConfig, ModelSpec, RunConfig, TopConfig, build

__all__ = ["BatchConfig", "ModelSpec", "RunConfig", "TopConfig", "build"]
