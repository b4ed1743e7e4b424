"""What a call costs: prices per million tokens, the output budget a request asks for, the most a
call can cost (what the run budget reserves before sending it) and the per-model calibration of
input-token estimates. Pure functions: the gateways, the batch tier and the estimates all price
calls with these.
"""

from __future__ import annotations

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


def skipped_for_budget(started: float) -> CallResult:
    return CallResult(status="skipped", cause="budget", error="run budget exhausted; not sent",
                      started_at=started, finished_at=started)
