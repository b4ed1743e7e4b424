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

The gateways reach the budget only through its actor handle, which the flow passes down with each
batch; what a call costs, and what it may cost at most, is calls/pricing.py.
"""

from __future__ import annotations

from typing import Any

import ray


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
