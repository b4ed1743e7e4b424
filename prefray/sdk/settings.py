"""A benchmark's settings, typed: the keys of its config (`<name>.yaml`, `benchmark.KEY=VALUE`) and
of its conditions (`conditions/<condition>.yaml`), each with its rule and its default.

A benchmark subclasses `BenchmarkSettings` (the keys every benchmark has: name, conditions,
samples, prompts, paper_judge, paper_models) and, when its conditions carry keys, `ConditionSettings`,
as frozen dataclasses whose fields are made with `key` (a rule from below, a default, one line of
meaning), `section` (a nested group of keys), `section_map` (names to groups), `params_key` (request
parameters), `samples_key` and `role_key`; it names them on its `Benchmark` as `settings_type` and
`condition_type`. Composing a sweep builds every job's sections into them before anything starts
(an unknown key, a missing one or a refused value is one line naming the key) and the benchmark
reads attributes: `job.settings.samples`, `job.condition_settings.history`.

A config file repeats the defaults a user sees; a benchmark's test keeps the two equal.
"""

from prefray.engine.config.rules import Rule, boolean, choice, integer, mapping, number, path, text
from prefray.engine.config.schema import (
    REQUIRED,
    BenchmarkSettings,
    ConditionSettings,
    key,
    params_key,
    role_key,
    samples_key,
    section,
    section_map,
    text_list,
)

__all__ = ["REQUIRED", "BenchmarkSettings", "ConditionSettings", "Rule", "boolean", "choice", "integer", "key",
           "mapping", "number", "params_key", "path", "role_key", "samples_key", "section", "section_map", "text",
           "text_list"]
