"""The fake provider's prompt cache: both providers' semantics, so tests measure real behaviour.

The fake counts four characters a token (answers.count_tokens); a prompt's text for caching is its
system prompt and messages in order, each as "<role>:<text>\\n" (system first).

OpenAI (automatic prefix caching): a prompt of at least `min_tokens` (1,024) tokens is cached in
steps of 128 tokens: after a request, every prefix of 1,024 + 128·k tokens of it is kept for
`lifetime_s`; the next request reports as `cached_tokens` the longest kept prefix it starts with
(each hit refreshes its lifetime).

Both look up the cache when a request arrives and write it when its answer is ready (after the
server's latency), as a provider computes a prefix before it can keep it: requests that share a
prefix and arrive together all miss. `prompt_cache_key` is accepted and counted; it does not change
what hits (the fake runs one machine, so every request reaches the same cache).

Anthropic (explicit breakpoints): blocks with `cache_control` (at most 4) mark prefixes. A marked
prefix shorter than `min_tokens` is not cached. The request reads the longest marked prefix still
kept (`cache_read_input_tokens`, its lifetime refreshed) and writes the longest marked prefix past it
(`cache_creation_input_tokens`); `input_tokens` counts the rest.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from prefray.fakellm import answers

STEP_TOKENS = 128
MAX_BREAKPOINTS = 4


@dataclass
class CacheUse:
    read: int = 0      # tokens read from the cache
    written: int = 0   # tokens written to it (Anthropic reports them)
    keep: list[str] = field(default_factory=list)   # prefixes to keep once the answer is ready


@dataclass
class PromptCache:
    lifetime_s: float = 300.0
    min_tokens: int = 1024
    kept: dict[str, float] = field(default_factory=dict)   # prefix hash -> monotonic expiry

    def _alive(self, key: str, now: float) -> bool:
        expiry = self.kept.get(key)
        if expiry is None:
            return False
        if expiry <= now:
            del self.kept[key]
            return False
        return True

    def openai(self, model: str, messages: list[dict[str, Any]], input_tokens: int) -> CacheUse:
        """Automatic prefix caching of a chat completion's prompt."""
        text = "".join(_piece(m.get("role"), m.get("content")) for m in messages)
        now = time.monotonic()
        longest = min(input_tokens, answers.count_tokens(text))
        cached = 0
        keep: list[str] = []
        digest = hashlib.sha256(f"openai\x1f{model}\x1f".encode())
        done = 0
        for tokens in range(self.min_tokens, longest + 1, STEP_TOKENS):
            digest.update(text[done * 4: tokens * 4].encode())
            done = tokens
            key = digest.copy().hexdigest()
            if self._alive(key, now):
                cached = tokens
            keep.append(key)
        return CacheUse(read=cached, keep=keep)

    def anthropic(self, model: str, system: Any, messages: list[dict[str, Any]]) -> CacheUse:
        """Caching up to the request's `cache_control` breakpoints."""
        marks: list[tuple[int, str]] = []   # (tokens of the prefix up to a breakpoint, its hash)
        digest = hashlib.sha256(f"anthropic\x1f{model}\x1f".encode())
        chars = 0
        for role, blocks in [("system", _blocks(system)), *((m.get("role"), _blocks(m.get("content")))
                                                             for m in messages)]:
            head = f"{role}:"
            digest.update(head.encode())
            chars += len(head)
            for block in blocks:
                text = str(block.get("text", ""))
                digest.update(text.encode())
                chars += len(text)
                if isinstance(block.get("cache_control"), dict):
                    marks.append((answers.count_tokens("x" * chars), digest.copy().hexdigest()))
            digest.update(b"\n")
            chars += 1
        marks = [m for m in marks[:MAX_BREAKPOINTS] if m[0] >= self.min_tokens]
        if not marks:
            return CacheUse()
        now = time.monotonic()
        read = 0
        for tokens, key in reversed(marks):
            if self._alive(key, now):
                read = tokens
                break
        longest = marks[-1][0]
        return CacheUse(read=read, written=max(0, longest - read), keep=[key for _, key in marks])

    def answered(self, use: CacheUse) -> None:
        """The request's answer is ready: its prefixes are kept (or refreshed) from now."""
        until = time.monotonic() + self.lifetime_s
        for key in use.keep:
            self.kept[key] = until

    def clear(self) -> None:
        self.kept.clear()


def _piece(role: Any, content: Any) -> str:
    return f"{role}:{answers.content_text(content)}\n"


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
