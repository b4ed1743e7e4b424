"""Anthropic messages through the official SDK."""

from __future__ import annotations

import inspect
from typing import Any

import anthropic

from prefray.engine.calls.providers.base import ProviderError, ProviderReply, sdk_errors
from prefray.engine.calls.providers.caching import anthropic_breakpoint
from prefray.engine.calls.providers.schema_subset import anthropic_schema
from prefray.engine.calls.rate_headers import rate_headers_subset
from prefray.engine.types import ChatRequest, ModelSpec

# Sampling parameters the SDK's `create` does not take as arguments go in the request body.
_BODY_PARAMS = ("temperature", "top_p", "top_k", "seed")


class AnthropicMessages:
    def __init__(self, spec: ModelSpec, api_key: str):
        self.spec = spec
        base_url = spec.base_url
        if base_url and base_url.rstrip("/").endswith("/v1"):
            base_url = base_url.rstrip("/")[: -len("/v1")]  # the SDK appends /v1/messages itself
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=spec.timeout_s,
            http_client=anthropic.DefaultAioHttpClient(timeout=spec.timeout_s),
        )

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        params = dict(request.params)
        extra = dict(params.pop("extra_body", None) or {})
        system, messages = anthropic_breakpoint(self.spec, request)
        body: dict[str, Any] = {
            "model": self.spec.model_id,
            "messages": messages,
            "max_tokens": int(params.pop("max_tokens", 1024)),
        }
        if system:
            body["system"] = system
        for name in _BODY_PARAMS:
            if name in params:
                extra[name] = params.pop(name)
        if request.seed is not None:
            extra.setdefault("seed", request.seed)
        if request.json_schema is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": anthropic_schema(request.json_schema)}}
        body.update(params)
        if extra:
            body["extra_body"] = extra
        return body

    async def close(self) -> None:
        await self.client.close()

    async def complete(self, request: ChatRequest) -> ProviderReply:
        async with sdk_errors(anthropic):
            raw = await self.client.messages.with_raw_response.create(**self._body(request))
            message = raw.parse()
            if inspect.isawaitable(message):  # the async raw response parses asynchronously in some SDKs
                message = await message
        return _reply(message, rate_headers_subset(raw.headers))


def _reply(message: Any, rate_headers: dict[str, str]) -> ProviderReply:
    try:
        text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
        usage = message.usage
        # Anthropic's input_tokens counts only the tokens after the last cache breakpoint: reads
        # and writes come apart, and all three are the call's input
        read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        return ProviderReply(
            text=text,
            model_version=message.model or "",
            input_tokens=int(usage.input_tokens or 0) + read + written,
            output_tokens=int(usage.output_tokens or 0),
            finish_reason=str(message.stop_reason or ""),
            rate_headers=rate_headers,
            cache_read_tokens=read,
            cache_write_tokens=written,
        )
    except (AttributeError, TypeError) as exc:
        raise ProviderError("bad_response", f"response without content: {exc}", retryable=True) from None
