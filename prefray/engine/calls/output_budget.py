"""How many output tokens a request may use: one rule for every benchmark, model and stage.

- A stage says how long a *visible* answer it needs (`max_tokens` in its params).
- A model config says how much it needs *on top* for reasoning (`reasoning_tokens`, 0 for models
  that do not think before answering) and may declare its own output length in its params
  (`max_tokens` or `max_completion_tokens`).
- The request carries the larger of what the model declares and stage + reasoning, capped by the
  model's own `max_output_tokens` when it has one, under the parameter name the model declares.

So a reasoning model is never sent less than it declares (gpt-5.2 at high effort keeps its 16,384),
and a judge stage's short answer cannot starve a thinking judge. The budget reservation, the plan
and the request all use this number.

A stage whose paper fixes the budget sets `exact_output_budget: true` beside its `max_tokens`: the
request then carries exactly stage + reasoning (still capped by `max_output_tokens`), whatever the
model declares. The key is a control key and is never sent.

A model config that sets a parameter to null in its params refuses it: the request never carries
that parameter, whatever the stage asks (o3-mini takes no temperature; Claude with thinking on takes
only its default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from prefray.engine.types import ChatRequest, ModelSpec

BUDGET_KEYS = ("max_completion_tokens", "max_tokens")
EXACT_KEY = "exact_output_budget"


def _declared(params: Mapping[str, Any]) -> tuple[str | None, int | None]:
    for key in BUDGET_KEYS:
        if params.get(key) is not None:
            return key, int(params[key])
    return None, None


def output_budget(spec: ModelSpec, stage_params: Mapping[str, Any]) -> tuple[str, int] | None:
    """(parameter name, tokens) the request carries, or None when neither stage nor model sets one."""
    model_key, model_tokens = _declared(spec.params)
    _, answer_tokens = _declared(stage_params)
    if model_tokens is None and answer_tokens is None:
        return None
    needed = answer_tokens + spec.reasoning_tokens if answer_tokens is not None else 0
    exact = bool(stage_params.get(EXACT_KEY)) and answer_tokens is not None
    tokens = needed if exact else max(model_tokens or 0, needed)
    if spec.max_output_tokens is not None:
        tokens = min(tokens, spec.max_output_tokens)
    return model_key or "max_tokens", tokens


def final_request(spec: ModelSpec, request: ChatRequest) -> ChatRequest:
    """The model's default params overlaid by the stage's own, with the output budget of the rule
    (and the seed moved by the model's `seed_offset`, for a judge's repeats)."""
    params = {**spec.params, **request.params}
    budget = output_budget(spec, request.params)
    refused = [key for key, value in spec.params.items() if value is None]
    for key in (*BUDGET_KEYS, EXACT_KEY, *refused):
        params.pop(key, None)
    if budget is not None:
        params[budget[0]] = budget[1]
    if spec.seed_offset and request.seed is not None:   # a judge's repeat asks with seeds of its own
        return replace(request, params=params, seed=request.seed + spec.seed_offset)
    return replace(request, params=params)
