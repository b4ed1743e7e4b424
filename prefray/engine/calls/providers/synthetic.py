"""Synthetic answers: a documented, deterministic function of the request. The dry run answers
with it (flow/dryrun.py), and so does prefray's fake provider server (prefray/fakellm).

Rule (tests rely on it to compute expected metrics independently):
  key    = sha256(f"{seed}\\n{last user message}")       (seed "" when absent)
  text   = "Fake answer <key[:8]>." followed by three lines of the last user message, picked by key
  JSON   = an instance of the requested schema; a boolean at path P is True iff
           sha256(f"{key}/{P}") has an odd first byte; integers and numbers fall in
           [minimum, maximum] (default 1..10), numbers in steps of 0.5; arrays have
           minItems..maxItems items (at most minItems + 3); strings are "fake-<hex>" or an enum value;
           bounds stated in a description as "Bounds: minimum=1, maximum=5." count as keywords.
  length = an answer longer than the request's output budget (max_tokens or max_completion_tokens,
           at four characters a token) is cut to budget × 4 characters and ends with finish reason
           "length" (Anthropic: stop reason "max_tokens").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prefray.engine.calls.providers.schema_subset import stated_bounds


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def content_text(content: Any) -> str:
    """Message content as plain text (OpenAI string or Anthropic/OpenAI block list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def last_user_message(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def answer_key(messages: list[dict[str, Any]], seed: int | None) -> str:
    seed_text = "" if seed is None else str(seed)
    return hashlib.sha256(f"{seed_text}\n{last_user_message(messages)}".encode()).hexdigest()


def answer_text(messages: list[dict[str, Any]], seed: int | None) -> str:
    key = answer_key(messages, seed)
    lines = [line.strip() for line in last_user_message(messages).splitlines() if line.strip()]
    digest = _sha(key)
    picked = [lines[digest[i] % len(lines)] for i in range(3)] if lines else []
    return " ".join([f"Fake answer {key[:8]}.", *picked])


def boolean_at(key: str, path: str) -> bool:
    return _sha(f"{key}/{path}")[0] % 2 == 1


def answer_json(schema: dict[str, Any], messages: list[dict[str, Any]], seed: int | None) -> Any:
    return _instance(schema, answer_key(messages, seed), "")


def _instance(schema: dict[str, Any], key: str, path: str) -> Any:
    schema = {**stated_bounds(schema), **schema}  # bounds an Anthropic-shaped schema states in words
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            return _instance(schema[combinator][0], key, path)
    if "enum" in schema:
        return schema["enum"][_sha(f"{key}/{path}")[0] % len(schema["enum"])]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    h = _sha(f"{key}/{path}")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: _instance(sub, key, f"{path}/{name}") for name, sub in props.items()}
    if kind == "boolean":
        return boolean_at(key, path)
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 1), schema.get("maximum", 10)
        steps = int((high - low) * (2 if kind == "number" else 1))
        value = low + (h[0] % (steps + 1)) / (2 if kind == "number" else 1)
        return int(value) if kind == "integer" else float(value)
    if kind == "array":
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + 3))
        high = min(high, low + 3)
        count = low + h[0] % (high - low + 1)
        return [_instance(schema.get("items", {"type": "string"}), key, f"{path}/{i}") for i in range(count)]
    return f"fake-{h.hex()[:8]}"


def count_tokens(text: str) -> int:
    """The fake's tokenizer: four characters a token (rounded up)."""
    return (len(text) + 3) // 4


def render_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
