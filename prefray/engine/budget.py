"""The run budget: one Ray actor per sweep that every gateway asks before sending a call.

A call reserves its maximum cost (estimated input tokens × 1.25 at the input price, plus its
max_tokens at the output price) and settles the real cost when the answer arrives, so concurrent
jobs and gateways can never commit more than the budget together. Once a reservation is refused
the budget is closed: every later call is skipped too (no cherry-picking of cheap calls), and
those rows are stored with status skipped and cause budget.
"""

from __future__ import annotations

from typing import Any

import ray

from prefray.engine.types import CallResult, ChatRequest, ModelSpec

INPUT_MARGIN = 1.25
DEFAULT_MAX_OUTPUT = 4096


def call_cost(spec: ModelSpec, input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * spec.price_input_per_mtok + output_tokens * spec.price_output_per_mtok) / 1e6


def max_output_tokens(request: ChatRequest) -> int:
    for name in ("max_tokens", "max_completion_tokens"):
        if name in request.params:
            return int(request.params[name])
    return DEFAULT_MAX_OUTPUT


def max_call_cost(spec: ModelSpec, request: ChatRequest) -> float:
    """What one call can cost at most (the amount reserved before sending it)."""
    estimated_input = int(request.estimated_input_tokens() * INPUT_MARGIN) + 1
    return call_cost(spec, estimated_input, max_output_tokens(request))


@ray.remote(num_cpus=0)
class Budget:
    def __init__(self, limit_usd: float):
        self.limit = float(limit_usd)
        self.spent = 0.0
        self.reserved = 0.0
        self.closed = False

    def reserve(self, amount: float) -> bool:
        if self.closed or self.spent + self.reserved + amount > self.limit:
            self.closed = True
            return False
        self.reserved += amount
        return True

    def settle(self, reserved: float, actual: float) -> None:
        self.reserved -= reserved
        self.spent += actual

    def state(self) -> dict[str, Any]:
        return {"limit_usd": self.limit, "spent_usd": self.spent, "reserved_usd": self.reserved,
                "closed": self.closed}


def skipped_for_budget(started: float) -> CallResult:
    return CallResult(status="skipped", cause="budget", error="run budget exhausted; not sent",
                      started_at=started, finished_at=started)
