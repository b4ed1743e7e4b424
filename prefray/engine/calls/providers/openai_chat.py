"""OpenAI (and OpenAI-compatible) chat completions through the official SDK.

The request goes out through the SDK's client (its auth, headers, HTTP transport, timeouts and
error types) as the JSON body built here, and the answer is read as JSON: `chat.completions.create`
would first rewrite that body through the SDK's typed-parameter transform and build a pydantic
model of the answer: 2.2 ms of CPU a call against 1.0 (bench/provider_cpu.py), which a lane at
hundreds of calls a second would pay for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2  # the OpenAI SDK's HTTP library: its responses are this type
import openai

from prefray.engine.calls.providers.base import ProviderError, ProviderReply, sdk_errors
from prefray.engine.calls.providers.caching import prompt_cache_key
from prefray.engine.calls.rate_headers import rate_headers_subset
from prefray.engine.types import ChatRequest, ModelSpec

CHAT_PATH = "/chat/completions"


class OpenAIChat:
    def __init__(self, spec: ModelSpec, api_key: str):
        self.spec = spec
        self.client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=spec.base_url,
            max_retries=0,  # engine.retry owns retries (capped waits, limiter re-acquire)
            timeout=spec.timeout_s,
            http_client=openai.DefaultAioHttpClient(timeout=spec.timeout_s),
        )

    def wire_body(self, request: ChatRequest) -> dict[str, Any]:
        """The request's JSON body as sent (and as a batch line's body)."""
        messages = list(request.messages)
        if request.system:
            messages = [{"role": "system", "content": request.system}, *messages]
        body: dict[str, Any] = {"model": self.spec.model_id, "messages": messages}
        params = dict(request.params)
        extra = params.pop("extra_body", None)
        if "max_completion_tokens" in self.spec.params and "max_tokens" in params:
            # models that only take max_completion_tokens: the stage's length limit wins
            params["max_completion_tokens"] = params.pop("max_tokens")
        body.update(params)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.n > 1:
            body["n"] = request.n
        if request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": request.json_schema, "strict": True},
            }
        key = prompt_cache_key(self.spec, request)
        if key is not None and "prompt_cache_key" not in body:
            body["prompt_cache_key"] = key
        body.update(extra or {})   # extra_body.NAME: a parameter the SDK does not know, sent as given
        return body

    async def close(self) -> None:
        await self.client.close()

    async def complete(self, request: ChatRequest) -> ProviderReply:
        async with sdk_errors(openai):
            response = await self.client.post(CHAT_PATH, body=self.wire_body(request), cast_to=httpx2.Response)
            completion = response.json()
        return read_reply(completion, rate_headers_subset(response.headers))


def read_reply(completion: Mapping[str, Any], rate_headers: dict[str, str]) -> ProviderReply:
    """A chat completion's JSON (as the API documents it) as the provider's reply: the first choice
    is the answer, the others (n > 1) its further samples."""
    try:
        first, *others = sorted(completion["choices"], key=lambda c: c.get("index") or 0)
        text, finish = _choice(first)
        usage = completion.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return ProviderReply(
            text=text,
            model_version=str(completion.get("model") or ""),
            input_tokens=int(usage.get("prompt_tokens") or 0),   # cached tokens included
            output_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=finish,
            rate_headers=rate_headers,
            cache_read_tokens=int(details.get("cached_tokens") or 0),
            more=[_choice(c) for c in others],
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ProviderError("bad_response", f"response without a message: {type(exc).__name__} {exc}",
                            retryable=True) from None


def _choice(choice: Mapping[str, Any]) -> tuple[str, str]:
    """One choice's text and finish reason; a refusal is the model's answer, scored as given."""
    message = choice["message"]
    finish = "refusal" if message.get("refusal") else str(choice.get("finish_reason") or "")
    return message.get("content") or "", finish
