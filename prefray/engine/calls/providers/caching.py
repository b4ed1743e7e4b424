"""Prompt caching on the wire: the part of a request that repeats (`ChatRequest.cache_prefix`, the
first characters of its text, the system prompt first) is marked for the provider's cache.

- Anthropic caches up to a `cache_control` breakpoint: the block holding the prefix's end is split
  there and the breakpoint set on its first half, when the prefix is long enough to be cached
  (`cache_min_tokens`, at four characters a token). The text sent stays the same, character for
  character; only its division into content blocks changes.
- OpenAI caches every prompt of 1,024 tokens and more by itself; a `prompt_cache_key` derived from
  the prefix (a hash: no user text leaves in it) sends requests sharing it to the same cache. It is
  sent to OpenAI's own endpoint and to endpoints whose config prices cached input (the fake);
  other OpenAI-compatible servers may refuse an unknown parameter.
"""

from __future__ import annotations

import hashlib
from typing import Any

from prefray.engine.types import ChatRequest, ModelSpec

EPHEMERAL = {"type": "ephemeral"}   # Anthropic's 5-minute cache


def prefix_text(request: ChatRequest, chars: int | None = None) -> str:
    """The first `chars` characters (default: the request's cache prefix) of the request's text:
    its system prompt, then each message's content, in order."""
    want = request.cache_prefix if chars is None else chars
    parts: list[str] = []
    taken = 0
    for text in [request.system or "", *(str(m.get("content") or "") for m in request.messages)]:
        if taken >= want:
            break
        parts.append(text[: want - taken])
        taken += len(parts[-1])
    return "".join(parts)


def prompt_cache_key(spec: ModelSpec, request: ChatRequest) -> str | None:
    """The OpenAI `prompt_cache_key` of a request with a cache prefix (None: send none)."""
    if not request.cache_prefix:
        return None
    own_endpoint = spec.base_url is None or "api.openai.com" in spec.base_url
    if not own_endpoint and spec.price_cache_read_per_mtok is None:
        return None
    digest = hashlib.sha256(f"{spec.model_id}\n{prefix_text(request)}".encode()).hexdigest()
    return f"prefray-{digest[:32]}"


def anthropic_breakpoint(spec: ModelSpec, request: ChatRequest) -> tuple[Any, list[dict[str, Any]]]:
    """(system, messages) of the Anthropic body, with a `cache_control` breakpoint at the end of the
    request's cache prefix where it is long enough to be cached (else as they are)."""
    messages = [dict(m) for m in request.messages]
    system: Any = request.system
    want = request.cache_prefix
    if not want or want // 4 < max(1, spec.cache_min_tokens):
        return system, messages
    if system:
        if want <= len(system):
            return _split(system, want), messages
        want -= len(system)
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            return system, messages   # already in blocks: left as the stage built it
        if want <= len(content):
            message["content"] = _split(content, want)
            return system, messages
        want -= len(content)
    return system, messages


def _split(text: str, at: int) -> list[dict[str, Any]]:
    """`text` as content blocks: up to `at` with the breakpoint, then the rest (if any)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text[:at], "cache_control": dict(EPHEMERAL)}]
    if text[at:]:
        blocks.append({"type": "text", "text": text[at:]})
    return blocks
