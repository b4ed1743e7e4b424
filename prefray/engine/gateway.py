"""Gateways: one Ray actor per provider endpoint and API key, shared by every job of a sweep.

A gateway owns the rate limits, the concurrency cap and the retries for its endpoint. It takes a
whole shard per call (an actor call costs ~0.5 ms, an HTTP call far more) and answers every
request with a CallResult: a failed call is a row with a cause, never an exception.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import ray

from prefray.engine.budget import call_cost, max_call_cost, skipped_for_budget
from prefray.engine.limits import ModelLimits, SharedBuckets, idle_seconds, limiter_name
from prefray.engine.providers import ProviderError, build_provider
from prefray.engine.providers.base import TRUNCATION_REASONS
from prefray.engine.retry import RetryPolicy
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

NAMESPACE = "prefray"
# Answers that mean "slow down": the lane halves its in-flight window.
PUSHBACK_CAUSES = frozenset({"rate_limit", "server_error"})


class _Lane:
    """Everything the gateway keeps for one model id: its client, limits and retry policy."""

    def __init__(self, spec: ModelSpec, api_key: str, shared: SharedBuckets | None = None):
        self.spec = spec
        self.api_key = api_key
        self.provider = build_provider(spec, api_key)
        self.limits = ModelLimits(spec.rpm, spec.tpm, spec.max_concurrency, shared)
        self.policy = RetryPolicy(max_attempts=spec.max_attempts, max_wait_s=spec.max_wait_s)

    def _redact(self, text: str) -> str:
        """Error texts are stored on rows: never with the API key in them."""
        return text.replace(self.api_key, "***") if len(self.api_key) >= 4 else text

    async def call(self, request: ChatRequest, budget: Any = None) -> CallResult:
        """One unit: reserve its maximum cost (if a budget is set), call with retries, settle."""
        started = time.time()
        reserved = max_call_cost(self.spec, request) if budget is not None else 0.0
        if budget is not None and not await budget.reserve.remote(reserved):
            return skipped_for_budget(started)
        result = await self._call_with_retries(request, started)
        result.cost_usd = call_cost(self.spec, result.input_tokens, result.output_tokens)
        if budget is not None:
            await budget.settle.remote(reserved, result.cost_usd)
        return result

    async def _call_with_retries(self, request: ChatRequest, started: float) -> CallResult:
        estimate = request.estimated_input_tokens()
        tries = 0
        while True:
            tries += 1
            async with self.limits.slot(estimate):
                sent = time.time()
                try:
                    reply = await asyncio.wait_for(self.provider.complete(request), self.spec.timeout_s + 5)
                except ProviderError as exc:
                    error = exc
                except asyncio.TimeoutError:
                    error = ProviderError("timeout", f"no answer within {self.spec.timeout_s:.0f}s", retryable=True)
                else:
                    done = time.time()
                    result = CallResult(
                        status="ok", text=reply.text, model_version=reply.model_version,
                        input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, tries=tries,
                        latency_s=done - sent, started_at=started, finished_at=done,
                        finish_reason=reply.finish_reason, truncated=reply.finish_reason in TRUNCATION_REASONS,
                    )
                    await self.limits.reconcile(estimate, reply.input_tokens)
                    await self.limits.answered(result.latency_s, reply.rate_headers)
                    return result
            if error.cause in PUSHBACK_CAUSES:
                await self.limits.pushed_back(error.rate_headers)
            wait = self.policy.wait_before_next(error, tries)
            if wait is None:
                done = time.time()
                return CallResult(status="failed", cause=error.cause, error=self._redact(str(error)), tries=tries,
                                  latency_s=done - sent, started_at=started, finished_at=done)
            await asyncio.sleep(wait)


@ray.remote(num_cpus=0, max_concurrency=1000)
class Gateway:
    def __init__(self, endpoint_key: str, api_key: str, limiter_idle_s: float = 60.0):
        self.endpoint_key = endpoint_key
        self.api_key = api_key
        self.limiter_idle_s = limiter_idle_s
        self.lanes: dict[str, _Lane] = {}

    def _shared(self, spec: ModelSpec) -> SharedBuckets:
        """This model's RPM/TPM budget in the cluster-wide limiter of this endpoint and key."""
        return SharedBuckets(limiter_name(self.endpoint_key, self.api_key), NAMESPACE, self.limiter_idle_s,
                             (spec.model_id, spec.rpm, spec.tpm), spec.rpm, spec.tpm)

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest], budget: Any = None) -> list[CallResult]:
        lane = self.lanes.get(spec.model_id)
        if lane is None:
            lane = self.lanes[spec.model_id] = _Lane(spec, self.api_key, self._shared(spec))
        return list(await asyncio.gather(*(lane.call(r, budget) for r in requests)))

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        for lane in self.lanes.values():
            await lane.provider.close()


def gateway_name(spec: ModelSpec) -> str:
    """Readable, unique to this driver: a killed run's dying actor is never picked up again."""
    job = ray.get_runtime_context().get_job_id()
    return f"gateway-{hashlib.sha1(spec.endpoint_key.encode()).hexdigest()[:12]}-{job}"


def on_this_node() -> dict[str, Any]:
    """Scheduling options that keep an actor on the driver's node (for 127.0.0.1 servers)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}


def get_gateway(spec: ModelSpec, api_key: str) -> Any:
    """The shared gateway for this model's endpoint and key, created on first use."""
    placement = on_this_node() if spec.serve else {}
    return Gateway.options(name=gateway_name(spec), namespace=NAMESPACE, get_if_exists=True,
                           **placement).remote(spec.endpoint_key, api_key, idle_seconds())
