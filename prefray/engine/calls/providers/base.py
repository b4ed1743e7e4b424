"""What every provider implements: translate a ChatRequest, make one call, classify failures.

Providers never sleep, loop or count: retries live in `engine.retry`, limits in `engine.limits`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from prefray.engine.calls.rate_headers import rate_headers_subset
from prefray.engine.types import ChatRequest


@dataclass
class ProviderReply:
    text: str
    model_version: str
    input_tokens: int      # every input token counted (cached or not)
    output_tokens: int
    finish_reason: str = ""   # the provider's own word: "stop", "length", "end_turn", "max_tokens", ...
    rate_headers: dict[str, str] = field(default_factory=dict)  # the reply's rate-limit headers
    cache_read_tokens: int = 0    # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0   # of input_tokens: written to it
    more: list[tuple[str, str]] = field(default_factory=list)   # choices after the first (text, finish reason)


# Finish reasons that mean the answer was cut by the output budget (OpenAI, Anthropic).
TRUNCATION_REASONS = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
# Words providers use when a prompt does not fit the model's context (OpenAI, Anthropic, vLLM, OpenRouter).
_CONTEXT_OVERFLOW_MARKERS = ("context_length_exceeded", "maximum context length", "context window",
                             "prompt is too long", "too many tokens", "context length")


class ProviderError(Exception):
    """A failed call, classified so the retry policy and the result row can use it."""

    def __init__(self, cause: str, message: str, *, retryable: bool, retry_after: float | None = None,
                 rate_headers: dict[str, str] | None = None):
        super().__init__(message)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after
        self.rate_headers = rate_headers or {}


class Provider(Protocol):
    async def complete(self, request: ChatRequest) -> ProviderReply: ...

    async def close(self) -> None: ...


def retry_after_seconds(headers: object) -> float | None:
    """Read `retry-after-ms` or `retry-after` (seconds) from response headers, if any."""
    if headers is None:
        return None
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if value:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue
    return None


def classify_status(status: int) -> tuple[str, bool]:
    """Map an HTTP status to (cause, retryable)."""
    if status == 429:
        return "rate_limit", True
    if status in (401, 403):
        return "auth", False
    if status == 404:
        return "model_not_found", False
    if status in (408, 409):
        return "timeout" if status == 408 else "server_error", True
    if status >= 500:
        return "server_error", True
    return "client_error", False


@contextlib.asynccontextmanager
async def sdk_errors(sdk: ModuleType) -> AsyncIterator[None]:
    """Turn the errors of an official SDK (openai or anthropic: same exception names) into
    ProviderError with a cause, a retry verdict and any retry-after the provider sent."""
    try:
        yield
    except sdk.APIStatusError as exc:
        if exc.status_code in (400, 413) and is_context_overflow(exc):
            raise ProviderError("context_overflow", f"HTTP {exc.status_code}: prompt exceeds the model's context: "
                                f"{str(exc)[:300]}", retryable=False) from None
        cause, retryable = classify_status(exc.status_code)
        raise ProviderError(cause, f"HTTP {exc.status_code}: {str(exc)[:300]}", retryable=retryable,
                            retry_after=retry_after_seconds(exc.response.headers),
                            rate_headers=rate_headers_subset(exc.response.headers)) from None
    except sdk.APIConnectionError as exc:  # APITimeoutError is a subclass: tell the two apart by their origin
        dropped = connection_failure(exc)
        if dropped is not None:
            raise ProviderError("connection", f"connection failed: {dropped[:300]}", retryable=True) from None
        cause = "timeout" if isinstance(exc, sdk.APITimeoutError) else "connection"
        raise ProviderError(cause, str(exc)[:300], retryable=True) from None
    except (sdk.APIResponseValidationError, ValueError, TypeError) as exc:
        raise ProviderError("bad_response", f"unreadable response: {str(exc)[:300]}", retryable=True) from None


def is_context_overflow(exc: Exception) -> bool:
    """A provider's refusal because the prompt does not fit the model's context window."""
    code = str(getattr(exc, "code", "") or "")
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in _CONTEXT_OVERFLOW_MARKERS)


def connection_failure(exc: BaseException) -> str | None:
    """The message of a refused, reset or dropped connection somewhere in the error's chain, if any.

    The OpenAI SDK reports a refused connection as a timeout; the chain tells the truth."""
    import aiohttp

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
                                aiohttp.ClientOSError)):
            return str(current) or type(current).__name__
        current = current.__cause__ or current.__context__
    return None
