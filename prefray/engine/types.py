"""Typed work units and results shared by every part of the engine."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

# The model a call goes to is the config's own typed model option (one definition: rule, default,
# meaning and runtime behaviour in one dataclass).
from prefray.engine.config.schema import ModelSpec, Provider  # noqa: E402,F401  (re-exported)

Status = Literal["ok", "failed", "skipped"]


class Cause(StrEnum):
    """Why a row did not end ok. Stored on the row (its `cause` column holds the value; "" when the
    row is ok) so reruns select by it, and read by the failure policy (engine/failures.py), which
    says what each cause means for a unit."""

    RATE_LIMIT = "rate_limit"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    CONNECTION = "connection"
    BAD_RESPONSE = "bad_response"
    CLIENT_ERROR = "client_error"
    AUTH = "auth"
    MODEL_NOT_FOUND = "model_not_found"
    BUDGET = "budget"
    PARSE_ERROR = "parse_error"
    CONTEXT_OVERFLOW = "context_overflow"


# What each cause means, in the words the docs' cause table and `prefray.rerun --help` print.
CAUSE_MEANINGS: dict[Cause, str] = {
    Cause.RATE_LIMIT: "the provider answered HTTP 429 (rate limit) on every try",
    Cause.TIMEOUT: "no answer within the model's timeout_s (or HTTP 408, or a batch expired first)",
    Cause.SERVER_ERROR: "the provider failed (HTTP 5xx or 409, or a batch ended before the call was answered)",
    Cause.CONNECTION: "the connection was refused or dropped on every try",
    Cause.BAD_RESPONSE: "the HTTP answer could not be read as the provider's format",
    Cause.CLIENT_ERROR: "the provider refused the request (an HTTP 4xx no other cause names)",
    Cause.AUTH: "the API key was refused (HTTP 401/403); the lane stops sending",
    Cause.MODEL_NOT_FOUND: "the endpoint does not serve the model id (HTTP 404); the lane stops sending",
    Cause.BUDGET: "not sent: run.budget_usd was spent",
    Cause.PARSE_ERROR: "the answer stayed unparsable where the stage asks for a format, after one re-ask",
    Cause.CONTEXT_OVERFLOW: "the provider refused the prompt as longer than the model's context (not retried)",
}


@dataclass(frozen=True)
class ChatRequest:
    """One provider call, independent of the provider's wire format."""

    messages: tuple[dict[str, str], ...]
    system: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    json_schema: dict[str, Any] | None = None
    seed: int | None = None
    # Characters at the start of the request's text (the system prompt, then each message's content,
    # in order) that repeat across the stage's requests: the profile, memory or prior sessions, the
    # judge's instructions and the answer under judgment. The provider marks their end for its
    # prompt cache (engine/calls/providers/caching.py); it changes no text, hash or answer.
    cache_prefix: int = field(default=0, compare=False)
    # Choices asked in this one request (the samples of a unit, engine/calls/samples.py); like
    # cache_prefix, not part of the request's hashes: each sample is stored and hashed as its own.
    n: int = field(default=1, compare=False)
    # hashes computed so far, by (kind, model id): a call's request is hashed for its row, the
    # request store, the paid record and the journal (not an init field: `replace` starts afresh)
    _hashes: dict[tuple[str, str], str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def _payload(self, model_id: str) -> dict[str, Any]:
        return {"model": model_id, "messages": list(self.messages), "system": self.system,
                "params": self.params, "json_schema": self.json_schema}

    def content_hash(self, model_id: str) -> str:
        """Stable hash of everything that determines the answer (the seed included)."""
        found = self._hashes.get(("content", model_id))
        if found is None:
            blob = json.dumps({**self._payload(model_id), "seed": self.seed}, sort_keys=True, ensure_ascii=False)
            found = self._hashes[("content", model_id)] = hashlib.sha256(blob.encode()).hexdigest()
        return found

    def prompt_hash(self, model_id: str) -> str:
        """Stable hash of what was sent except the seed: the key of the run's request store."""
        found = self._hashes.get(("prompt", model_id))
        if found is None:
            blob = json.dumps(self._payload(model_id), sort_keys=True, ensure_ascii=False)
            found = self._hashes[("prompt", model_id)] = hashlib.sha256(blob.encode()).hexdigest()
        return found

    def estimated_input_tokens(self) -> int:
        """Rough count (4 characters a token, plus a few per message) for limits and budgets."""
        chars = sum(len(m["content"]) for m in self.messages) + len(self.system or "")
        if self.json_schema:
            chars += len(json.dumps(self.json_schema))
        return chars // 4 + 4 * len(self.messages) + 8


@dataclass(frozen=True)
class WorkUnit:
    """One call a benchmark stage needs, with the ids that make it resumable."""

    instance_id: str
    request: ChatRequest
    item: str = ""
    sample: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class CallResult:
    """What came back for one request, successful or not."""

    status: Status
    text: str = ""
    cause: Cause | Literal[""] = ""
    error: str = ""
    model_version: str = ""
    input_tokens: int = 0     # every input token the provider counted, cached or not
    output_tokens: int = 0
    cache_read_tokens: int = 0    # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0   # of input_tokens: written to it (Anthropic bills them apart)
    tries: int = 0
    latency_s: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    cached: bool = False      # answered from the response cache: nothing sent, nothing paid
    cost_usd: float = 0.0     # what this call cost (0 when cached or when nothing was billed)
    finish_reason: str = ""   # the provider's own finish/stop reason ("stop", "length", "end_turn", ...)
    truncated: bool = False   # the answer was cut by the output budget (finish reason length/max_tokens)
    cache_saved_usd: float = 0.0  # what the prompt cache saved on this call (negative: writes cost more)
    # the other choices (text, finish reason) of a request asking n, until split per sample
    more: list[tuple[str, str]] = field(default_factory=list)


def cache_through(system: str | None, messages: tuple[dict[str, str], ...], repeated: str | None) -> int:
    """A request's `cache_prefix` (its text up to the end of the `repeated` part, system prompt
    first): 0 when the part is empty or not in the request."""
    if not repeated:
        return 0
    text = (system or "") + "".join(str(m.get("content") or "") for m in messages)
    at = text.find(repeated)
    return 0 if at < 0 else at + len(repeated)


def stable_id(*parts: object) -> str:
    """Short deterministic id from the parts that define a unit."""
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:20]
