"""What every provider implements: translate a ChatRequest, make one call, classify failures.

Providers never sleep, loop or count: retries live in `engine.retry`, limits in `engine.limits`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import ModuleType
from typing import AsyncIterator, Protocol

from prefray.engine.types import ChatRequest, ModelSpec


@dataclass
class ProviderReply:
    text: str
    model_version: str
    input_tokens: int
    output_tokens: int


class ProviderError(Exception):
    """A failed call, classified so the retry policy and the result row can use it."""

    def __init__(self, cause: str, message: str, *, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after


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
        cause, retryable = classify_status(exc.status_code)
        raise ProviderError(cause, f"HTTP {exc.status_code}: {str(exc)[:300]}", retryable=retryable,
                            retry_after=retry_after_seconds(exc.response.headers)) from None
    except sdk.APITimeoutError as exc:
        raise ProviderError("timeout", str(exc)[:300], retryable=True) from None
    except sdk.APIConnectionError as exc:
        raise ProviderError("connection", str(exc)[:300], retryable=True) from None
    except (sdk.APIResponseValidationError, ValueError, TypeError) as exc:
        raise ProviderError("bad_response", f"unreadable response: {str(exc)[:300]}", retryable=True) from None


def build_provider(spec: ModelSpec, api_key: str) -> Provider:
    if spec.provider == "openai":
        from prefray.engine.providers.openai_chat import OpenAIChat

        return OpenAIChat(spec, api_key)
    if spec.provider == "anthropic":
        from prefray.engine.providers.anthropic_messages import AnthropicMessages

        return AnthropicMessages(spec, api_key)
    raise ValueError(f"model '{spec.name}': unknown provider '{spec.provider}' (openai | anthropic)")
