"""Sending for the prompt cache: a prefix is written once, then read.

A provider caches a prefix once an answer to it is computed; requests that share a prefix and go
out at the same moment all miss (and on Anthropic each pays the cache-write price). So within a
batch a gateway sends, for each prefix its lane has not sent within the cache's lifetime, one
request first (the leader); the others of that prefix wait for the leader's answer, then go out
together and read what it wrote. Requests without a marked prefix, and prefixes still warm, go out
at once. Every request still takes its turn and its limits through the lane (fair share between
jobs and the rate limits are the lane's, unchanged). The runner keeps a stage's units in the order
the stage builds them, and stages build the units of one prefix together (one BenchPreS profile's
contexts and samples, one CUPID instance's calls), so they reach the lane close together, well
within the cache's lifetime.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from prefray.engine.calls.pricing import CACHE_LIFETIME_S, CacheExpectation, call_cost, expected_cache
from prefray.engine.calls.providers.caching import prefix_text
from prefray.engine.types import ChatRequest, ModelSpec

T = TypeVar("T")
R = TypeVar("R")


class WarmPrefixes:
    """The prefixes a lane sent, and until when the provider keeps them (refreshed by each use)."""

    def __init__(self, spec: ModelSpec, lifetime_s: float = CACHE_LIFETIME_S):
        self.spec = spec
        self.lifetime_s = lifetime_s
        self.until: dict[str, float] = {}
        self.leaders: dict[str, asyncio.Future] = {}   # the request of each cold prefix in flight

    def key(self, request: ChatRequest) -> str | None:
        """The prefix a request shares with others, if long enough to be cached (else None)."""
        if not request.cache_prefix or request.cache_prefix // 4 < max(1, self.spec.cache_min_tokens):
            return None
        return hashlib.sha1(prefix_text(request).encode()).hexdigest()

    def cold(self, key: str | None) -> bool:
        return key is not None and self.until.get(key, 0.0) <= time.monotonic()

    def used(self, key: str | None) -> None:
        if key is not None:
            self.until[key] = time.monotonic() + self.lifetime_s
            if len(self.until) > 100_000:   # forget the expired ones now and then
                now = time.monotonic()
                self.until = {k: t for k, t in self.until.items() if t > now}


async def prefix_first(items: Sequence[T], keys: Sequence[str | None], warm: WarmPrefixes,
                       call: Callable[[T], Awaitable[R]]) -> list[R]:
    """`call` on every item, concurrently, except that of the items sharing a cold prefix the first
    goes alone (in this batch or another of the lane) and the others after its answer."""

    async def lead(item: T, key: str) -> R:
        try:
            return await call(item)
        finally:
            warm.used(key)
            warm.leaders.pop(key, None)

    async def follow(item: T, key: str | None) -> R:
        leader = warm.leaders.get(key) if key is not None else None
        if leader is not None:
            await asyncio.wait([leader])
        warm.used(key)
        return await call(item)

    tasks: list[Awaitable[R]] = []
    for item, key in zip(items, keys):
        if key is not None and key not in warm.leaders and warm.cold(key):
            warm.leaders[key] = asyncio.ensure_future(lead(item, key))
            tasks.append(warm.leaders[key])
        else:
            tasks.append(follow(item, key))
    return list(await asyncio.gather(*tasks))


@dataclass
class PrefixGroups:
    """Requests of one stage grouped by the prefix they declare, whichever model answers them: per
    prefix (a hash of its text) the calls, their input tokens and the prefix's length in characters.
    `expected(spec)` prices them for one model (its minimum prefix, provider and cached prices), so
    one grouping serves every model a plan prices the same requests for."""

    groups: dict[str, list[int]] = field(default_factory=dict)   # prefix → [calls, input tokens, chars]
    input_tokens: int = 0   # every request's input tokens, with or without a prefix

    def add(self, request: ChatRequest, input_tokens: int) -> None:
        self.input_tokens += input_tokens
        if not request.cache_prefix:
            return
        key = hashlib.sha1(prefix_text(request).encode()).hexdigest()
        group = self.groups.setdefault(key, [0, 0, request.cache_prefix])
        group[0] += 1
        group[1] += input_tokens

    def expected(self, spec: ModelSpec) -> CacheExpectation:
        """What `spec` can expect from the prompt cache on these requests, sent as the runner sends
        them: each prefix long enough for `spec` priced by `expected_cache` at its requests' mean
        input; the other requests at the input price."""
        minimum = max(1, spec.cache_min_tokens)
        plain = self.input_tokens
        cost = uncached = 0.0
        total = reads = writes = 0
        for calls, tokens, chars in self.groups.values():
            if chars // 4 < minimum:
                continue
            plain -= tokens
            mean = tokens // calls
            got = expected_cache(spec, calls, chars // 4, mean)
            cost, uncached = cost + got.cost_usd, uncached + got.uncached_cost_usd
            reads, writes, total = reads + got.read_tokens, writes + got.write_tokens, total + calls * mean
        cost, uncached = cost + call_cost(spec, plain, 0), uncached + call_cost(spec, plain, 0)
        total += plain
        return CacheExpectation(hit_rate=reads / total if total else 0.0, cost_usd=cost, uncached_cost_usd=uncached,
                                read_tokens=reads, write_tokens=writes)


def expected_for(spec: ModelSpec, requests: Sequence[ChatRequest]) -> CacheExpectation:
    """What a plan can expect from the prompt cache on these requests (one model, sent as the runner
    sends them): requests grouped by their declared prefix, each group priced by `expected_cache`
    at its requests' estimated input; requests without a cacheable prefix at the input price. The
    OpenAI route also caches repeated prompts nobody declared; this counts only declared prefixes."""
    groups = PrefixGroups()
    for request in requests:
        groups.add(request, request.estimated_input_tokens())
    return groups.expected(spec)
