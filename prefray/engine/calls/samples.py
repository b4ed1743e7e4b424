"""Several samples in one request: a model with `samples_per_request` k > 1 answers the samples of
a unit (the same request, seeds s, s+1, ...) with one chat completion asking `n` choices.

Within a batch, requests with the same prompt and consecutive seeds form groups of at most k; each
group goes out as its first request with `n` = the group's size, and choice i answers the sample
with seed s + i (the provider's seed for choice i; prefray's fake answers it as it answers a
single request with that seed). Everything stays per sample:
- rows: one per sample, each with its choice's text and finish reason;
- input: billed once per request, so the group's first sample carries the input tokens (and their
  cost) and the others carry their output only; output tokens are the provider's total split over
  the choices by length (summing to the total);
- the ledger: one try per request, with its usage; the budget reserves the input once and every
  choice's output budget;
- a failed request fails every sample of its group with the same cause, and a rerun asks them again
  together (a shard never splits a unit's samples: flow/runner.py).
Requests without a seed are never grouped (their samples would differ from single requests').
"""

from __future__ import annotations

from dataclasses import replace

from prefray.engine.calls.pricing import call_cost
from prefray.engine.calls.providers.base import TRUNCATION_REASONS
from prefray.engine.types import CallResult, Cause, ChatRequest, ModelSpec


def sample_groups(spec: ModelSpec, requests: list[ChatRequest]) -> list[list[int]]:
    """Indices of `requests`, in groups answered by one request each (singletons where k is 1)."""
    size = spec.samples_per_request
    if size <= 1:
        return [[i] for i in range(len(requests))]
    by_prompt: dict[str, list[int]] = {}
    singles: list[list[int]] = []
    for i, request in enumerate(requests):
        if request.seed is None or "n" in request.params or request.n > 1:
            singles.append([i])
        else:
            by_prompt.setdefault(request.prompt_hash(spec.model_id), []).append(i)
    groups: list[list[int]] = []
    for indices in by_prompt.values():
        indices.sort(key=lambda i: requests[i].seed)
        current: list[int] = []
        for i in indices:
            if current and (len(current) >= size or requests[i].seed != requests[current[-1]].seed + 1):
                groups.append(current)
                current = []
            current.append(i)
        groups.append(current)
    return sorted(groups + singles, key=lambda g: g[0])


def with_n(request: ChatRequest, n: int) -> ChatRequest:
    """The group's request: its first sample's, asking `n` choices."""
    return request if n == 1 else replace(request, n=n)


def split_output(total: int, texts: list[str]) -> list[int]:
    """The provider's output tokens of a request, split over its choices by their length (largest
    remainder, so the parts sum to `total`)."""
    if not texts:
        return []
    weights = [max(1, len(t)) for t in texts]
    whole = sum(weights)
    shares = [total * w / whole for w in weights]
    parts = [int(s) for s in shares]
    for i in sorted(range(len(texts)), key=lambda i: shares[i] - parts[i], reverse=True)[: total - sum(parts)]:
        parts[i] += 1
    return parts


def split_choices(spec: ModelSpec, result: CallResult, n: int) -> list[CallResult]:
    """One request's result as its `n` samples' (see the module docstring)."""
    if result.status != "ok":
        first = replace(result, more=[])
        return [first] + [replace(first, cost_usd=0.0, cache_saved_usd=0.0) for _ in range(n - 1)]
    choices = [(result.text, result.finish_reason), *result.more][:n]
    outputs = split_output(result.output_tokens, [text for text, _ in choices])
    out = []
    for i, ((text, finish), tokens) in enumerate(zip(choices, outputs)):
        first = i == 0
        out.append(replace(
            result, text=text, finish_reason=finish, truncated=finish in TRUNCATION_REASONS, more=[],
            output_tokens=tokens, input_tokens=result.input_tokens if first else 0,
            cache_read_tokens=result.cache_read_tokens if first else 0,
            cache_write_tokens=result.cache_write_tokens if first else 0,
            cache_saved_usd=result.cache_saved_usd if first else 0.0,
            cost_usd=call_cost(spec, result.input_tokens if first else 0, tokens,
                               result.cache_read_tokens if first else 0, result.cache_write_tokens if first else 0)))
    for _ in range(n - len(out)):   # a provider that answered fewer choices than asked
        out.append(CallResult(status="failed", cause=Cause.BAD_RESPONSE, tries=result.tries,
                              error=f"the provider answered {len(choices)} of {n} choices asked",
                              started_at=result.started_at, finished_at=result.finished_at))
    return out
