"""Typed work units and results shared by every part of the engine."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Provider = Literal["openai", "anthropic"]
Status = Literal["ok", "failed", "skipped"]
# Why a row did not end ok. Stored on the row so reruns can select by cause.
Cause = Literal[
    "rate_limit", "timeout", "server_error", "connection", "bad_response",
    "client_error", "auth", "parse_error", "budget", "context_overflow", "model_not_found", "",
]


@dataclass(frozen=True)
class ModelSpec:
    """One model reached through one provider endpoint (a `conf/model/*.yaml` option)."""

    name: str
    provider: Provider
    model_id: str
    base_url: str | None = None
    api_key_env: str | None = None
    rpm: float | None = None
    tpm: float | None = None
    # Ceiling on calls in flight. With an rpm limit the lane keeps rpm/60 × measured latency in
    # flight (Little's law) up to this ceiling; without one, it keeps this many.
    max_concurrency: int = 8
    # Processes (gateway actors) sending this model's calls; the ceiling above is split among them.
    # One process sends a few hundred calls a second at most (the SDK's work per call is ~2 ms of
    # CPU), so a lane faster than that needs more (see engine/calls/gateway.py: lane_processes).
    gateway_processes: int = 1
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    timeout_s: float = 120.0
    max_attempts: int = 4
    max_wait_s: float = 60.0
    params: dict[str, Any] = field(default_factory=dict)
    # Hard cap on output tokens, applied over any stage's max_tokens (e.g. for a slow local model).
    max_output_tokens: int | None = None
    # Output tokens the model spends reasoning before its visible answer (see engine/calls/output_budget.py).
    reasoning_tokens: int = 0
    serve: Literal["embedded", "fakellm"] | None = None
    # How calls are sent: "interactive" (one HTTP call each) or "batch" (the provider's batch API,
    # answered within 24 h at a lower price; see engine/calls/batch/). `run.tier` overrides every model.
    tier: Literal["interactive", "batch"] = "interactive"
    # Share of the price saved at the batch tier (0.5 = half price); null = the endpoint offers no
    # batch API, so `tier: batch` is refused for it.
    batch_discount: float | None = None

    @property
    def endpoint_key(self) -> str:
        """Identity of the endpoint and key this model is called through (its rate limits' owner)."""
        return f"{self.provider}|{self.base_url or 'default'}|{self.api_key_env or ''}"

    @property
    def gateway_key(self) -> str:
        """Identity of the gateway that owns this model's calls: endpoint, key and model id."""
        return f"{self.endpoint_key}|{self.model_id}"

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "ModelSpec":
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"model '{cfg.get('name')}': unknown field(s) {unknown}")
        return cls(**{k: v for k, v in cfg.items() if k in known})


@dataclass(frozen=True)
class ChatRequest:
    """One provider call, independent of the provider's wire format."""

    messages: tuple[dict[str, str], ...]
    system: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    json_schema: dict[str, Any] | None = None
    seed: int | None = None
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
    cause: Cause = ""
    error: str = ""
    model_version: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    tries: int = 0
    latency_s: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    cached: bool = False      # answered from the response cache: nothing sent, nothing paid
    cost_usd: float = 0.0     # what this call cost (0 when cached or when nothing was billed)
    finish_reason: str = ""   # the provider's own finish/stop reason ("stop", "length", "end_turn", ...)
    truncated: bool = False   # the answer was cut by the output budget (finish reason length/max_tokens)


def stable_id(*parts: object) -> str:
    """Short deterministic id from the parts that define a unit."""
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:20]
