"""What a call costs: prices per million tokens, the output budget a request asks for, the most a
call can cost (what the run budget reserves before sending it) and the per-model calibration of
input-token estimates. Pure functions: the gateways, the batch tier and the estimates all price
calls with these.

Prompt caching: of a call's input tokens, those the provider read from its prompt cache are billed
at `price_cache_read_per_mtok` and those it wrote to it at `price_cache_write_per_mtok` (either null:
the input price); the rest at the input price. `cache_saving` is what caching changed on a call,
`expected_cache` what a plan can expect from the shared prefixes it sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefray.engine.types import CallResult, ChatRequest, ModelSpec

INPUT_MARGIN = 1.25
DEFAULT_MAX_OUTPUT = 4096


def cache_read_price(spec: ModelSpec) -> float:
    """USD per million input tokens read from the prompt cache."""
    read = spec.price_cache_read_per_mtok
    return spec.price_input_per_mtok if read is None else float(read)


def cache_write_price(spec: ModelSpec) -> float:
    """USD per million input tokens written to the prompt cache."""
    write = spec.price_cache_write_per_mtok
    return spec.price_input_per_mtok if write is None else float(write)


def call_cost(spec: ModelSpec, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0,
              cache_write_tokens: int = 0) -> float:
    """USD of one call: `input_tokens` counts every input token, of which `cache_read_tokens` were
    read from the prompt cache and `cache_write_tokens` written to it."""
    plain = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    return (plain * spec.price_input_per_mtok + cache_read_tokens * cache_read_price(spec)
            + cache_write_tokens * cache_write_price(spec) + output_tokens * spec.price_output_per_mtok) / 1e6


def cache_saving(spec: ModelSpec, cache_read_tokens: int, cache_write_tokens: int) -> float:
    """USD the prompt cache saved on a call against the same tokens at the input price (negative
    when writes cost more than they saved)."""
    return (cache_read_tokens * (spec.price_input_per_mtok - cache_read_price(spec))
            + cache_write_tokens * (spec.price_input_per_mtok - cache_write_price(spec))) / 1e6


def max_output_tokens(request: ChatRequest) -> int:
    for name in ("max_tokens", "max_completion_tokens"):
        if name in request.params:
            return int(request.params[name])
    return DEFAULT_MAX_OUTPUT


def max_call_cost(spec: ModelSpec, request: ChatRequest, input_ratio: float = 1.0) -> float:
    """What one call can cost at most (the amount reserved before sending it); `input_ratio` is
    the model's learned ratio of reported to estimated input tokens."""
    estimated_input = int(request.estimated_input_tokens() * INPUT_MARGIN * max(1.0, input_ratio)) + 1
    output = max_output_tokens(request) * max(1, request.n)   # every choice of a request asking n
    if request.cache_prefix and cache_write_price(spec) > spec.price_input_per_mtok:
        # a marked prefix may be written to the cache, at most all of the input at the write price
        return call_cost(spec, estimated_input, output, cache_write_tokens=estimated_input)
    return call_cost(spec, estimated_input, output)


# How long a provider keeps a cached prefix after its last use (OpenAI: 5 to 10 minutes of
# inactivity; Anthropic: 5 minutes, refreshed on each read).
CACHE_LIFETIME_S = 300.0
CACHE_STEP_TOKENS = 128   # OpenAI caches a prefix in steps of this many tokens past the minimum


def cacheable_tokens(spec: ModelSpec, prefix_tokens: int) -> int:
    """Tokens of a repeated prefix the provider caches: none below `cache_min_tokens`; OpenAI in
    steps of CACHE_STEP_TOKENS; Anthropic the whole prefix up to its breakpoint."""
    if prefix_tokens < max(1, spec.cache_min_tokens):
        return 0
    if spec.provider == "openai":
        return spec.cache_min_tokens + (prefix_tokens - spec.cache_min_tokens) // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS
    return prefix_tokens


@dataclass(frozen=True)
class CacheExpectation:
    """What a plan can expect from prompt caching on a group of calls sharing one prefix."""

    hit_rate: float        # share of the group's input tokens read from the cache
    cost_usd: float        # the group's input at the cached prices
    uncached_cost_usd: float   # the same input at the input price
    read_tokens: int = 0   # input tokens read from the cache
    write_tokens: int = 0  # input tokens written to it (billed on Anthropic only)

    @property
    def saved_usd(self) -> float:
        return self.uncached_cost_usd - self.cost_usd


def expected_cache(spec: ModelSpec, calls: int, prefix_tokens: int, input_tokens: int) -> CacheExpectation:
    """Expected caching of `calls` calls of `input_tokens` input each that share a prefix of
    `prefix_tokens` and are sent within the cache's lifetime: the first writes the prefix (Anthropic
    bills the write, OpenAI does not), every later one reads it. A pure function for the plan
    (prefray.plan): it assumes no eviction and the calls sent close together, as the runner does."""
    total = calls * input_tokens
    cached = cacheable_tokens(spec, min(prefix_tokens, input_tokens)) if calls > 1 else 0
    reads = cached * max(0, calls - 1)
    writes = cached if cached and spec.provider == "anthropic" else 0
    cost = call_cost(spec, total, 0, reads, writes)
    return CacheExpectation(hit_rate=reads / total if total else 0.0, cost_usd=cost,
                            uncached_cost_usd=call_cost(spec, total, 0), read_tokens=reads, write_tokens=writes)


class Calibration:
    """Per model: reported vs estimated input tokens over every answer so far."""

    def __init__(self) -> None:
        self.estimated = 0
        self.reported = 0

    def add(self, estimated: int, reported: int) -> None:
        if reported > 0:
            self.estimated += max(1, estimated)
            self.reported += reported

    @property
    def ratio(self) -> float:
        return self.reported / self.estimated if self.estimated else 1.0


def skipped_for_budget(started: float) -> CallResult:
    return CallResult(status="skipped", cause="budget", error="run budget exhausted; not sent",
                      started_at=started, finished_at=started)
