"""The run budget: one Ray actor per sweep that every gateway asks before sending a call.

A call reserves its maximum cost (estimated input tokens × 1.25 × the model's calibration ratio
at the input price, plus its max_tokens at the output price) and settles the real cost when the
answer arrives, so concurrent jobs and gateways can never commit more than the budget together.
Once a reservation is refused the budget is closed: every later call is skipped too (no
cherry-picking of cheap calls), and those rows are stored with status skipped and cause budget.

Estimates can be wrong (a provider may count far more input tokens than characters / 4). Each
model calibrates: its first calls go out in a small batch (the lane's probe calls), the ratio of
reported to estimated input tokens is learned from every answer, and later reservations are
scaled by it (never below 1). After calibration, any call that settles above its reservation
closes the budget at once and the run ends with a warning.
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


def max_call_cost(spec: ModelSpec, request: ChatRequest, input_ratio: float = 1.0) -> float:
    """What one call can cost at most (the amount reserved before sending it); `input_ratio` is
    the model's learned ratio of reported to estimated input tokens."""
    estimated_input = int(request.estimated_input_tokens() * INPUT_MARGIN * max(1.0, input_ratio)) + 1
    return call_cost(spec, estimated_input, max_output_tokens(request))


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


@ray.remote(num_cpus=0)
class Budget:
    def __init__(self, limit_usd: float):
        self.limit = float(limit_usd)
        self.spent = 0.0
        self.reserved = 0.0
        self.closed = False
        self.overruns: list[tuple[float, float]] = []   # (reserved, settled) of calls above their reservation

    def reserve(self, amount: float) -> bool:
        if self.closed or self.spent + self.reserved + amount > self.limit:
            self.closed = True
            return False
        self.reserved += amount
        return True

    def settle(self, reserved: float, actual: float, calibrating: bool = False) -> None:
        """Book a call's real cost; one above its reservation (after calibration) closes the budget."""
        self.reserved -= reserved
        self.spent += actual
        if actual > reserved * (1 + 1e-9) and not calibrating:
            self.closed = True
            self.overruns.append((reserved, actual))
        if self.spent >= self.limit:
            self.closed = True

    def state(self) -> dict[str, Any]:
        worst = max(self.overruns, key=lambda o: o[1] / max(o[0], 1e-12)) if self.overruns else None
        return {"limit_usd": self.limit, "spent_usd": self.spent, "reserved_usd": self.reserved,
                "closed": self.closed, "overruns": len(self.overruns), "worst_overrun": worst}


def budget_warning(state: dict[str, Any]) -> str | None:
    """The warning line for a budget closed by a call that cost more than it reserved."""
    if not state.get("overruns"):
        return None
    reserved, actual = state["worst_overrun"]
    return (f"prefray: warning: {state['overruns']} call(s) cost more than reserved (worst {actual:.6f} USD "
            f"against {reserved:.6f} reserved: the provider counted more tokens than estimated); the budget "
            f"was closed at once, spent {state['spent_usd']:.4f} of {state['limit_usd']:.2f} USD")


def skipped_for_budget(started: float) -> CallResult:
    return CallResult(status="skipped", cause="budget", error="run budget exhausted; not sent",
                      started_at=started, finished_at=started)
