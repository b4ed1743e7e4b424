"""Anthropic messages through the official SDK.

As with OpenAI (providers/openai_chat.py), the request goes out through the SDK's client as the
JSON body built here and the answer is read as JSON, without the SDK's pydantic model of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2  # the Anthropic SDK's HTTP library: its responses are this type

from prefray.engine.calls.providers.base import ProviderError, ProviderReply, sdk_errors
from prefray.engine.calls.providers.caching import anthropic_breakpoint
from prefray.engine.calls.providers.schema_subset import anthropic_schema
from prefray.engine.calls.rate_headers import rate_headers_subset
from prefray.engine.types import ChatRequest, ModelSpec

MESSAGES_PATH = "/v1/messages"


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

    def wire_body(self, request: ChatRequest) -> dict[str, Any]:
        """The request's JSON body as sent (and as a batch line's params)."""
        params = dict(request.params)
        extra = params.pop("extra_body", None) or {}
        system, messages = anthropic_breakpoint(self.spec, request)
        body: dict[str, Any] = {
            "model": self.spec.model_id,
            "messages": messages,
            "max_tokens": int(params.pop("max_tokens", 1024)),
        }
        if system:
            body["system"] = system
        if request.seed is not None:
            body["seed"] = request.seed
        if request.json_schema is not None:
            body["output_config"] = {"format": {"type": "json_schema", "schema": anthropic_schema(request.json_schema)}}
        body.update(params)        # the stage's sampling parameters (a seed among them wins)
        body.update(extra)         # extra_body.NAME: a parameter the SDK does not know, sent as given
        return body

    async def close(self) -> None:
        await self.client.close()

    async def complete(self, request: ChatRequest) -> ProviderReply:
        async with sdk_errors(anthropic):
            response = await self.client.post(MESSAGES_PATH, body=self.wire_body(request), cast_to=httpx2.Response)
            message = response.json()
        return read_reply(message, rate_headers_subset(response.headers))


def read_reply(message: Mapping[str, Any], rate_headers: dict[str, str]) -> ProviderReply:
    """A message's JSON (as the API documents it) as the provider's reply: its text blocks joined."""
    try:
        text = "".join(block["text"] for block in message["content"] if block.get("type") == "text")
        usage = message["usage"]
        # Anthropic's input_tokens counts only the tokens after the last cache breakpoint: reads
        # and writes come apart, and all three are the call's input
        read = int(usage.get("cache_read_input_tokens") or 0)
        written = int(usage.get("cache_creation_input_tokens") or 0)
        return ProviderReply(
            text=text,
            model_version=str(message.get("model") or ""),
            input_tokens=int(usage.get("input_tokens") or 0) + read + written,
            output_tokens=int(usage.get("output_tokens") or 0),
            finish_reason=str(message.get("stop_reason") or ""),
            rate_headers=rate_headers,
            cache_read_tokens=read,
            cache_write_tokens=written,
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ProviderError("bad_response", f"response without content: {type(exc).__name__} {exc}",
                            retryable=True) from None
