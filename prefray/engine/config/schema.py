"""The typed schema of a composed prefray config: every key, its type, default and allowed values.

`limit`, `run.*`, `model.*` and `judge.*` (and every model option a benchmark role names) are fixed
dataclasses below. A benchmark's and a condition's own keys are typed by their option file: a key
keeps the type of its default there (an integer stays an integer), well-known names get their
bounds wherever they appear (`max_tokens` >= 1, `temperature` in [0, 2], ...), and only the keys
the option file defines exist, apart from the open maps (`prompts`, `params`, `roles`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from prefray.engine.config.rules import (
    Rule, anything, boolean, choice, integer, mapping, number, path, text, url,
)


def key(rule: Rule, default: Any, doc: str) -> Any:
    """A schema field: its rule and a one-line meaning travel in the field's metadata."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"rule": rule, "doc": doc})
    return field(default=default, metadata={"rule": rule, "doc": doc})


def rule_of(f: dataclasses.Field) -> Rule:
    return f.metadata["rule"]


@dataclass(frozen=True)
class TopConfig:
    limit: int | None = key(integer(1).or_null("all instances"), None,
                            "at most this many dataset instances per benchmark")


@dataclass(frozen=True)
class BatchConfig:
    max_requests: int = key(integer(1), 10000, "a batch is submitted once it holds this many requests")
    max_age_s: float = key(number(minimum=0), 2.0, "... or once its oldest request waited this long")
    poll_s: float = key(number(above=0), 5.0, "first wait between status polls of a submitted batch")
    poll_max_s: float = key(number(above=0), 60.0, "longest wait between status polls")


def section(cls: type, doc: str) -> Any:
    """A nested fixed section (checked key by key against `cls`)."""
    return field(default_factory=dict, metadata={"rule": mapping(f"a mapping of {cls.__name__} keys"),
                                                 "doc": doc, "section": cls})


@dataclass(frozen=True)
class RunConfig:
    dir: str | None = key(path().or_null("outputs/<timestamp>"), None,
                          "result root of the sweep: a directory (created if missing) this user can write, "
                          "or a URI such as s3://bucket/prefix")
    staging_dir: str | None = key(path().or_null("~/.cache/prefray/staging/<hash of run.dir>/run"), None,
                                  "local folder mirroring a URI run.dir while it runs")
    shard_size: int | None = key(integer(1).or_null("per lane: its max_concurrency within 16 to 64, at most "
                                                    "a second of its rpm"), None,
                                 "work units per gateway call (one Parquet shard each; a rate-limited lane "
                                 "takes about a second of its sends)")
    compact: bool = key(boolean(), True, "roll each job's small shards into large Parquet files as it runs and ends")
    compact_every: int = key(integer(0), 256, "small shards a job writes before they are rolled (0: only at its end)")
    seed: int = key(integer(0), 0, "base seed; sample i of a unit is sent with seed + i")
    progress: bool = key(boolean(), True, "show a live progress display")
    budget_usd: float | None = key(number(above=0).or_null("no budget"), None,
                                   "stop spending at this many US dollars")
    cache: bool = key(boolean(), True, "answer identical requests from the response cache")
    cache_dir: str | None = key(path().or_null("<parent of run.dir>/.prefray-cache"), None,
                                "response cache folder: a directory this user can write")
    estimate_output_ratio: float = key(number(above=0, maximum=1), 0.5,
                                       "estimates assume an answer uses this share of its max_tokens")
    tier: str | None = key(choice("interactive", "batch").or_null("each model's own tier"), None,
                           "tier of every model of the sweep")
    batch: dict = section(BatchConfig, "batch tier submission and polling")


@dataclass(frozen=True)
class ModelConfig:
    """One model option (`model=`, `judge=`, `benchmark.roles.*`); mirrors engine.types.ModelSpec."""

    name: str = key(text(), "", "the option's name")
    provider: str = key(choice("openai", "anthropic"), "openai", "which SDK and wire format")
    model_id: str = key(text(), "", "the provider's model id")
    base_url: str | None = key(url().or_null("the provider's default"), None, "endpoint")
    api_key_env: str | None = key(text(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")
                                  .or_null("no key"), None, "environment variable holding the API key")
    rpm: float | None = key(number(above=0).or_null("no limit"), None, "requests per minute")
    tpm: float | None = key(number(above=0).or_null("no limit"), None, "input tokens per minute")
    max_concurrency: int = key(integer(1), 8, "calls in flight at once")
    gateway_processes: int = key(integer(1), 1, "processes sending this model's calls (more with rpm above 6000)")
    price_input_per_mtok: float = key(number(minimum=0), 0.0, "USD per million input tokens")
    price_output_per_mtok: float = key(number(minimum=0), 0.0, "USD per million output tokens")
    timeout_s: float = key(number(above=0), 120.0, "seconds before a call counts as timed out")
    max_attempts: int = key(integer(1), 4, "tries per call (1 = no retry)")
    max_wait_s: float = key(number(minimum=0), 60.0, "longest single wait between tries")
    params: dict = key(mapping("a mapping of request parameters (max_tokens, temperature, ...)"), {},
                       "default request parameters")
    max_output_tokens: int | None = key(integer(1).or_null("no cap"), None, "cap on any stage's max_tokens")
    serve: str | None = key(choice("embedded", "fakellm").or_null("a remote endpoint"), None,
                            "serve the endpoint locally")
    reasoning_tokens: int = key(integer(0), 0, "output tokens spent reasoning before the visible answer")
    tier: str = key(choice("interactive", "batch"), "interactive", "one HTTP call each, or the batch API")
    batch_discount: float | None = key(number(minimum=0, maximum=1).or_null("no batch API"), None,
                                       "share of the price saved at the batch tier")


# Bounds for well-known names, wherever they appear (model params, benchmark stage params, ...).
NAMED_RULES: dict[str, Rule] = {
    "max_tokens": integer(1),
    "max_completion_tokens": integer(1),
    "temperature": number(minimum=0, maximum=2),
    "top_p": number(minimum=0, maximum=1),
    "n": integer(1),
    "samples": integer(1),
    "top_k": integer(1),
}

# Benchmark/condition keys whose content is open: any sub-key may be set.
OPEN_MAPS: dict[str, Rule] = {
    "prompts": mapping("prompt name -> file path"),
    "params": mapping("a mapping of request parameters"),
}

ROLE_OPTION = text(what="a model option name").or_null("the sweep's judge")
PROMPT_PATH = path().or_null("the benchmark's own prompt")

# The top-level sections: fixed dataclasses, or an option's own file (benchmark, condition).
SECTIONS: dict[str, type] = {"run": RunConfig, "model": ModelConfig, "judge": ModelConfig}
OPTION_SECTIONS = ("benchmark", "condition")


def inferred_rule(name: str, reference: Any) -> Rule:
    """The rule for a benchmark/condition key: its well-known bounds, else its default's type."""
    if name in NAMED_RULES:
        rule = NAMED_RULES[name]
        return rule.or_null() if reference is None else rule
    if reference is None:
        return anything("any value (default null)")
    if isinstance(reference, bool):
        return boolean()
    if isinstance(reference, int):
        return integer()
    if isinstance(reference, float):
        return number()
    if isinstance(reference, str):
        return Rule("a string", lambda v: isinstance(v, str))
    if isinstance(reference, list):
        return Rule("a list", lambda v: isinstance(v, list))
    return mapping("a mapping")


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}
