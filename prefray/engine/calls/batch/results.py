"""Provider batch result lines → CallResult, exactly as an interactive call would have stored them.

Answers go through the same reply readers as interactive calls (text, model version, usage, finish
reason, truncation); cost is usage at the batch price. A request the provider did not answer
becomes a failed result with a cause, so `prefray.rerun` can send it again:
  error status or error object → the cause its HTTP status or error type means
  expired (the batch's window closed first) → timeout
  canceled, or no line at all → server_error
"""

from __future__ import annotations

from typing import Any

from prefray.engine.calls.batch.tier import tier_cost, tier_saving
from prefray.engine.calls.providers.base import (
    TRUNCATION_REASONS,
    ProviderError,
    ProviderReply,
    classify_status,
    is_context_overflow,
)
from prefray.engine.types import CallResult, ModelSpec

# Anthropic error types → (cause, HTTP status they stand for)
_ANTHROPIC_ERRORS = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "overloaded_error": 529, "timeout_error": 504,
}


def answered(spec: ModelSpec, reply: ProviderReply, started: float, finished: float) -> CallResult:
    return CallResult(status="ok", text=reply.text, model_version=reply.model_version,
                      input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, tries=1,
                      latency_s=finished - started, started_at=started, finished_at=finished,
                      cost_usd=tier_cost(spec, reply.input_tokens, reply.output_tokens, "batch",
                                         reply.cache_read_tokens, reply.cache_write_tokens),
                      cache_read_tokens=reply.cache_read_tokens, cache_write_tokens=reply.cache_write_tokens,
                      cache_saved_usd=tier_saving(spec, reply.cache_read_tokens, reply.cache_write_tokens, "batch"),
                      finish_reason=reply.finish_reason, truncated=reply.finish_reason in TRUNCATION_REASONS)


def failed(cause: str, error: str, started: float, finished: float) -> CallResult:
    return CallResult(status="failed", cause=cause, error=error[:500], tries=1, latency_s=finished - started,
                      started_at=started, finished_at=finished)  # type: ignore[arg-type]


def _status_failure(status: int, message: str, code: str, started: float, finished: float) -> CallResult:
    if status in (400, 413) and is_context_overflow(Exception(f"{code} {message}")):
        return failed("context_overflow", f"HTTP {status}: prompt exceeds the model's context: {message}",
                      started, finished)
    cause, _ = classify_status(status)
    return failed(cause, f"HTTP {status} (in batch): {message}", started, finished)


def openai_line(spec: ModelSpec, line: dict[str, Any], started: float, finished: float) -> CallResult:
    """One line of an OpenAI batch output or error file."""
    from prefray.engine.calls.providers.openai_chat import read_reply

    response = line.get("response") or {}
    status = int(response.get("status_code") or 0)
    body = response.get("body") or {}
    if status == 200:
        try:
            return answered(spec, read_reply(body, {}), started, finished)
        except (ProviderError, ValueError) as exc:
            return failed("bad_response", f"unreadable batch answer: {exc}", started, finished)
    if status:
        error = body.get("error") or {}
        return _status_failure(status, str(error.get("message") or body)[:300], str(error.get("code") or ""),
                               started, finished)
    error = line.get("error") or {}
    code, message = str(error.get("code") or ""), str(error.get("message") or "no answer in the batch")
    if code == "batch_expired":
        return failed("timeout", f"batch expired before this request was answered: {message}", started, finished)
    if code == "batch_cancelled":
        return failed("server_error", f"batch cancelled before this request was answered: {message}",
                      started, finished)
    return failed("server_error", f"batch error {code}: {message}", started, finished)


def anthropic_line(spec: ModelSpec, line: dict[str, Any], started: float, finished: float) -> CallResult:
    """One line of an Anthropic message batch's results ({custom_id, result: {type, ...}})."""
    from prefray.engine.calls.providers.anthropic_messages import read_reply

    result = line.get("result") or {}
    kind = result.get("type")
    if kind == "succeeded":
        try:
            return answered(spec, read_reply(result.get("message") or {}, {}), started, finished)
        except (ProviderError, ValueError) as exc:
            return failed("bad_response", f"unreadable batch answer: {exc}", started, finished)
    if kind == "errored":
        error = (result.get("error") or {}).get("error") or {}
        status = _ANTHROPIC_ERRORS.get(str(error.get("type")), 500)
        return _status_failure(status, str(error.get("message") or error)[:300], str(error.get("type") or ""),
                               started, finished)
    if kind == "expired":
        return failed("timeout", "batch expired before this request was answered", started, finished)
    if kind == "canceled":
        return failed("server_error", "batch canceled before this request was answered", started, finished)
    return failed("bad_response", f"unknown batch result type {kind!r}", started, finished)


def missing(started: float, finished: float, why: str = "") -> CallResult:
    return failed("server_error", f"no result for this request in the batch{': ' + why if why else ''}",
                  started, finished)
