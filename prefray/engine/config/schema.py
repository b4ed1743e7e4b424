"""The typed schema of a composed prefray config: every key, its type, default and allowed values.

`limit`, `run.*`, `model.*` and `judge.*` (and every model option a benchmark role names) are fixed
dataclasses below, and they are the objects the engine runs with: `ModelSpec` is what a gateway
calls, `RunConfig` what the session and the runner read. Every default is stated here once
(`conf/config.yaml` repeats the run defaults a user sees, a test keeps them equal; a model option
file lists only what differs, and composing fills in the rest: `file_defaults`).

A benchmark's and a condition's keys are typed by the benchmark: `BenchmarkSettings` and
`ConditionSettings` below hold the keys every benchmark has, and a benchmark declares its own keys
in a subclass of each (its `settings_type` and `condition_type`), built with the same `key` and
`section` helpers, so a composed config is checked key by key before anything starts and the
benchmark reads typed attributes. An open mapping of request parameters (`params_key`) takes any
key, and the well-known names get their bounds in it (`max_tokens` >= 1, `temperature` in [0, 2], ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from prefray.engine.config.rules import (
    Rule,
    boolean,
    choice,
    integer,
    mapping,
    number,
    path,
    text,
    url,
)

# A key without a default: every option file must set it.
REQUIRED = dataclasses.MISSING

# Upper bounds: far above any real use, low enough that a slip (an extra zero, 1e20) is refused
# before anything starts instead of overflowing, waiting forever or reserving an unbounded budget.
SEED_MAX = 2**62            # seed + sample index stays within a signed 64-bit integer
TOKENS_MAX = 10**7          # no model answers or reasons with ten million tokens
SAMPLES_MAX = 10**4
INSTANCES_MAX = 10**8
SECONDS_MAX = 7 * 86400     # a week: any wait, timeout or poll
USD_MAX = 10**6
RATE_MAX = 10**12           # requests or tokens per minute
PRICE_MAX = 10**4           # USD per million tokens


def key(rule: Rule, default: Any, doc: str, *, in_files: bool = True, each: Rule | None = None,
        open_map: bool = False) -> Any:
    """A schema field: its rule and a one-line meaning travel in the field's metadata;
    `in_files=False` marks a key only prefray sets (never written in an option file, nor filled in).
    For a mapping: `each` is the rule of every value; `open_map` takes any key, the well-known names
    (NAMED_RULES) within their bounds at any depth."""
    metadata = {"rule": rule, "doc": doc, "in_files": in_files, "each": each, "open": open_map}
    if default is REQUIRED:
        return field(metadata=metadata)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls: type, doc: str) -> Any:
    """A nested fixed section (checked key by key against `cls`, built as a `cls`)."""
    return field(default_factory=cls, metadata={"rule": mapping(f"a mapping of {cls.__name__} keys"),
                                                "doc": doc, "section": cls})


def section_map(cls: type, doc: str, default: dict[str, Any] | None = None) -> Any:
    """A mapping of names to sections of `cls` (each value checked key by key, built as a `cls`)."""
    rule = mapping(f"a mapping of name -> {cls.__name__} keys")
    return field(default_factory=lambda: dict(default or {}), metadata={"rule": rule, "doc": doc, "section_map": cls})


def rule_of(f: dataclasses.Field) -> Rule:
    return f.metadata["rule"]


def default_of(f: dataclasses.Field) -> Any:
    """A field's default (a section's default as a dict of its own defaults); REQUIRED if none."""
    if "section" in f.metadata:
        return {g.name: default_of(g) for g in dataclasses.fields(f.metadata["section"])}
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@dataclass(frozen=True)
class TopConfig:
    limit: int | None = key(integer(1, INSTANCES_MAX).or_null("all instances"), None,
                            "at most this many dataset instances per benchmark")


@dataclass(frozen=True)
class BatchConfig:
    """The `run.batch` section: when the batch tier submits a batch and how it polls it."""

    max_requests: int = key(integer(1, 10**6), 10000, "a batch is submitted once it holds this many requests")
    max_age_s: float = key(number(minimum=0, maximum=SECONDS_MAX), 2.0,
                           "... or once its oldest request waited this long")
    poll_s: float = key(number(above=0, maximum=SECONDS_MAX), 5.0,
                        "first wait between status polls of a submitted batch")
    poll_max_s: float = key(number(above=0, maximum=SECONDS_MAX), 60.0, "longest wait between status polls")


@dataclass(frozen=True)
class RunConfig:
    """The `run` section: settings shared by every job of a sweep."""

    dir: str | None = key(path().or_null("outputs/<timestamp>"), None,
                          "result root of the sweep: a directory (created if missing) this user can write, "
                          "or a URI such as s3://bucket/prefix")
    staging_dir: str | None = key(path().or_null("~/.cache/prefray/staging/<hash of run.dir>/run"), None,
                                  "local folder mirroring a URI run.dir while it runs")
    shard_size: int | None = key(integer(1, 10**6).or_null("per lane: its max_concurrency within 16 to 64, at most "
                                                    "a second of its rpm"), None,
                                 "work units per gateway call (one Parquet shard each; a rate-limited lane "
                                 "takes about a second of its sends)")
    compact: bool = key(boolean(), True, "roll each job's small shards into large Parquet files as it runs and ends")
    compact_every: int = key(integer(0, 10**9), 256,
                             "small shards a job writes before they are rolled (0: only at its end)")
    seed: int = key(integer(0, SEED_MAX), 0, "base seed; sample i of a unit is sent with seed + i")
    progress: bool = key(boolean(), True, "show a live progress display")
    plots: bool = key(boolean(), True, "draw the figures (plots/*.png) when the metrics are written; "
                                       "false skips them")
    figures: str = key(choice("none", "headline", "all"), "headline",
                       "figures drawn with the metrics: headline (the papers' figures and one per headline "
                       "metric), all (also one per breakdown dimension and per diagnostic metric) or none; "
                       "run.plots=false means none")
    budget_usd: float | None = key(number(above=0, maximum=USD_MAX).or_null("no budget"), None,
                                   "stop spending at this many US dollars")
    cache: bool = key(boolean(), True, "answer identical requests from the response cache")
    cache_dir: str | None = key(path().or_null("<parent of run.dir>/.prefray-cache"), None,
                                "response cache folder: a directory this user can write")
    estimate_output_ratio: float = key(number(above=0, maximum=1), 0.5,
                                       "estimates assume an answer uses this share of its max_tokens")
    tier: str | None = key(choice("interactive", "batch").or_null("each model's own tier"), None,
                           "tier of every model of the sweep")
    batch: BatchConfig = section(BatchConfig, "batch tier submission and polling")
    panel: bool = key(boolean(), False, "the sweep's judges are one panel: its verdict (majority, or mean of "
                                        "numbers) is scored as one more judge, `judge=panel(a,b)` sets it")

    @classmethod
    def from_config(cls, run: dict[str, Any] | RunConfig | None) -> RunConfig:
        """The typed `run` section of a validated config (missing keys take their defaults)."""
        return run if isinstance(run, RunConfig) else build(cls, run or {})


Provider = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ModelSpec:
    """One model reached through one provider endpoint: a `conf/model/*.yaml` option, as `model=`,
    `judge=` or a benchmark role names it. The gateway calls it as it is."""

    name: str = key(text(), REQUIRED, "the option's name")
    provider: Provider = key(choice("openai", "anthropic"), REQUIRED, "which SDK and wire format")
    model_id: str = key(text(), REQUIRED, "the provider's model id")
    base_url: str | None = key(url().or_null("the provider's default"), None, "endpoint")
    api_key_env: str | None = key(text(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")
                                  .or_null("no key"), None, "environment variable holding the API key")
    rpm: float | None = key(number(above=0, maximum=RATE_MAX).or_null("no limit"), None, "requests per minute")
    tpm: float | None = key(number(above=0, maximum=RATE_MAX).or_null("no limit"), None, "input tokens per minute")
    # How the provider counts the rpm. null: over any span (OpenAI and Anthropic say a minute's limit
    # may be enforced per second), so requests are paced evenly from the first. W seconds: over a
    # sliding W-second window, rpm × W / 60 requests in any W s (60: a strict minute; the first
    # minute's requests may all go at once). A 429 all the same: paced from then on.
    rpm_window_s: float | None = key(number(above=0, maximum=3600).or_null("paced evenly"), None,
                                     "the sliding window in seconds over which the provider counts rpm")
    # Ceiling on calls in flight. With an rpm limit the lane keeps rpm/60 × measured latency in
    # flight (Little's law) up to this ceiling; without one, it keeps this many.
    max_concurrency: int = key(integer(1, 10**6), 8, "calls in flight at once")
    # Processes (gateway actors) sending this model's calls; the ceiling above is split among them.
    # One process sends a few hundred calls a second at most (a few ms of CPU a call), so a lane
    # faster than that needs more (see engine/calls/gateway.py: PROCESS_RPM, lane_processes).
    gateway_processes: int = key(integer(1, 1024), 1, "processes sending this model's calls (more with rpm above 6000)")
    price_input_per_mtok: float = key(number(minimum=0, maximum=PRICE_MAX), 0.0, "USD per million input tokens")
    price_output_per_mtok: float = key(number(minimum=0, maximum=PRICE_MAX), 0.0, "USD per million output tokens")
    # Prompt caching (engine/calls/pricing.py): input tokens read from the provider's cache, and
    # those written to it, at their own prices; null = the input price (no discount published).
    price_cache_read_per_mtok: float | None = key(number(minimum=0, maximum=PRICE_MAX).or_null("the input price"),
                                                  None, "USD per million input tokens read from the prompt cache")
    price_cache_write_per_mtok: float | None = key(number(minimum=0, maximum=PRICE_MAX).or_null("the input price"),
                                                   None, "USD per million input tokens written to the prompt cache")
    # Shortest repeated prefix the provider caches (OpenAI: 1024; Anthropic: 1024 to 4096 by model).
    cache_min_tokens: int = key(integer(0, TOKENS_MAX), 1024, "tokens a repeated prefix needs to be cached")
    timeout_s: float = key(number(above=0, maximum=SECONDS_MAX), 120.0, "seconds before a call counts as timed out")
    max_attempts: int = key(integer(1, 1000), 4, "tries per call (1 = no retry)")
    max_wait_s: float = key(number(minimum=0, maximum=SECONDS_MAX), 60.0, "longest single wait between tries")
    params: dict[str, Any] = key(mapping("a mapping of request parameters (max_tokens, temperature, ...)"), {},
                                 "default request parameters")
    # Applied over any stage's max_tokens (e.g. for a slow local model).
    max_output_tokens: int | None = key(integer(1, TOKENS_MAX).or_null("no cap"), None, "cap on any stage's max_tokens")
    # The context window: a request's prompt and its output budget together must fit in it; a launch
    # whose calls cannot fit is refused before it starts (engine/flow/horizon.py).
    context_tokens: int | None = key(integer(1, TOKENS_MAX).or_null("not known, not checked"), None,
                                     "tokens of the context window (prompt and output together)")
    # See engine/calls/output_budget.py.
    reasoning_tokens: int = key(integer(0, TOKENS_MAX), 0, "output tokens spent reasoning before the visible answer")
    # What the option is, as configured: a reasoning model (thinks before its visible answer) or not.
    # Descriptive only (nothing sent depends on it); paper tables mark by it (BenchPreS Table 1's *).
    reasoning: bool | None = key(boolean().or_null("not stated"), None,
                                 "the model reasons before its visible answer, as configured")
    serve: Literal["embedded", "fakellm"] | None = key(choice("embedded", "fakellm").or_null("a remote endpoint"),
                                                       None, "serve the endpoint locally")
    # "batch": the provider's batch API, answered within 24 h at a lower price (engine/calls/batch/).
    # `run.tier` overrides every model.
    tier: Literal["interactive", "batch"] = key(choice("interactive", "batch"), "interactive",
                                                "one HTTP call each, or the batch API")
    # null: the endpoint offers no batch API, so `tier: batch` is refused for it.
    batch_discount: float | None = key(number(minimum=0, maximum=1).or_null("no batch API"), None,
                                       "share of the price saved at the batch tier")
    # false: an option that exists for a paper's lineup (`model=paper`) and is left out of `model=all`.
    in_all: bool = key(boolean(), True, "included in model=all")
    # Set by `judge.repeats=K` on the K copies of a judge (prefray/app/panel.py): each asks with its own seeds.
    seed_offset: int = key(integer(0, SEED_MAX), 0, "added to the seed of every request this model answers",
                           in_files=False)
    # A unit's k samples go as ceil(k / samples_per_request) requests with `n` (OpenAI chat
    # completions; Anthropic has no `n`): input billed once per request (engine/calls/samples.py).
    samples_per_request: int = key(integer(1, 128), 1, "samples asked in one request with n (OpenAI only)")

    def __post_init__(self) -> None:
        if self.samples_per_request > 1 and self.provider != "openai":
            raise ValueError(f"samples_per_request={self.samples_per_request} needs a provider that takes n "
                             f"(openai); {self.provider} answers one sample per request")

    @property
    def endpoint_key(self) -> str:
        """Identity of the endpoint and key this model is called through (its rate limits' owner)."""
        return f"{self.provider}|{self.base_url or 'default'}|{self.api_key_env or ''}"

    @property
    def gateway_key(self) -> str:
        """Identity of the gateway that owns this model's calls: endpoint, key and model id."""
        return f"{self.endpoint_key}|{self.model_id}"

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelSpec:
        """The spec of a model option's config; an unknown field or a missing required one is a
        ValueError naming the option."""
        try:
            return build(cls, cfg, coerce=False)
        except ValueError as exc:
            raise ValueError(f"model '{cfg.get('name')}': {exc}") from None


# Bounds for well-known names, wherever they appear (model params, benchmark stage params, ...).
NAMED_RULES: dict[str, Rule] = {
    "max_tokens": integer(1, TOKENS_MAX),
    "max_completion_tokens": integer(1, TOKENS_MAX),
    "temperature": number(minimum=0, maximum=2),
    "top_p": number(minimum=0, maximum=1),
    "n": integer(1, 128),
    "samples": integer(1, SAMPLES_MAX),
    "top_k": integer(1, 10**6),
}

# Mappings whose content is open: any sub-key may be set.
OPEN_MAPS: dict[str, Rule] = {
    "prompts": mapping("prompt name -> file path"),
    "params": mapping("a mapping of request parameters"),
}

ROLE_OPTION = text(what="a model option name").or_null("the sweep's judge")
PROMPT_PATH = path().or_null("the benchmark's own prompt")

# The top-level sections: fixed dataclasses, or the types the benchmark declares (benchmark, condition).
SECTIONS: dict[str, type] = {"run": RunConfig, "model": ModelSpec, "judge": ModelSpec}
OPTION_SECTIONS = ("benchmark", "condition")


def file_defaults(cls: type) -> dict[str, Any]:
    """The keys an option file of `cls` may leave out, each with the default composing fills in:
    every key with a default, less those only prefray sets (`in_files=False`)."""
    return {f.name: default_of(f) for f in dataclasses.fields(cls)
            if default_of(f) is not REQUIRED and f.metadata.get("in_files", True)}


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def build(cls: type, values: dict[str, Any], coerce: bool = True) -> Any:
    """A validated section as its dataclass: missing keys take the schema's default, nested
    sections are built as theirs (a dotted key such as `batch.poll_s`, as a rerun records it, sets
    the nested key), and with `coerce` an integer given for a number key becomes a float. An
    unknown key or a missing required one is a ValueError."""
    fields = fields_of(cls)
    given: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        head, dot, rest = name.partition(".")
        if dot and "section" in fields.get(head, field()).metadata:
            nested.setdefault(head, {})[rest] = value
        else:
            given[name] = value
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}")
    missing = sorted(n for n, f in fields.items() if default_of(f) is REQUIRED and n not in given)
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    for name, extra in nested.items():
        given[name] = {**(given.get(name) or {}), **extra}
    for name, value in given.items():
        f = fields[name]
        if "section" in f.metadata:
            given[name] = build(f.metadata["section"], value or {}, coerce)
        elif "section_map" in f.metadata:
            given[name] = {k: build(f.metadata["section_map"], v or {}, coerce) for k, v in (value or {}).items()}
        elif coerce and isinstance(value, int) and not isinstance(value, bool) and "float" in str(f.type):
            given[name] = float(value)
    return cls(**given)


def params_key(default: dict[str, Any], doc: str) -> Any:
    """Request parameters of a stage (max_tokens, temperature, ...): an open mapping, the well-known
    names within their bounds."""
    return key(OPEN_MAPS["params"], default, doc, open_map=True)


def samples_key(default: int, doc: str = "answers asked per unit") -> Any:
    return key(NAMED_RULES["samples"], default, doc)


def role_key(doc: str) -> Any:
    """A scorer role's model option (null: the sweep's judge answers for it)."""
    return key(ROLE_OPTION, None, doc)


def text_list(what: str) -> Rule:
    return Rule(f"a list of {what}", lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v))


@dataclass(frozen=True)
class BenchmarkSettings:
    """The `benchmark` section: the keys every benchmark has (its option file, `<benchmark>.yaml`).

    A benchmark declares its own keys in a subclass (its `settings_type`), each with its rule and
    default, and reads them as attributes (`job.settings.retrieval.top_k`)."""

    name: str = key(text(), REQUIRED, "the benchmark's name (its entry point's)")
    impl: str | None = key(text().or_null("not recorded"), None, "the benchmark object (package.module:ATTRIBUTE)",
                           in_files=False)
    conditions: list[str] = key(text_list("condition names"), [], "the benchmark's conditions, in order "
                                "(conditions/<name>.yaml beside its config)")
    default_condition: str | None = key(text().or_null("the first condition"), None,
                                        "the condition a job runs without condition=")
    samples: int = samples_key(1)
    prompts: dict[str, str | None] = key(OPEN_MAPS["prompts"], {}, "prompt files replaced for a run "
                                         "(benchmark.prompts.NAME=PATH; null: the benchmark's prompts/NAME.txt)",
                                         each=PROMPT_PATH)
    paper_judge: str | None = key(text(what="a judge option name").or_null("choose one with judge="), None,
                                  "the judge a job gets when the sweep names none (the paper's)")
    paper_models: list[str] = key(text_list("model option names"), [], "the models `model=paper` stands for")


@dataclass(frozen=True)
class ConditionSettings:
    """The `condition` section: the keys every condition has. A benchmark whose conditions carry
    keys of their own declares them in a subclass (its `condition_type`)."""

    name: str = key(text(), REQUIRED, "the condition's name")
