"""OpenAI (and OpenAI-compatible) chat completions through the official SDK."""

from __future__ import annotations

import inspect
from typing import Any

import openai

from prefray.engine.calls.providers.base import ProviderError, ProviderReply, sdk_errors
from prefray.engine.calls.providers.caching import prompt_cache_key
from prefray.engine.calls.rate_headers import rate_headers_subset
from prefray.engine.types import ChatRequest, ModelSpec


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

    def _body(self, request: ChatRequest) -> dict[str, Any]:
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
        if extra:
            body["extra_body"] = dict(extra)
        return body

    async def close(self) -> None:
        await self.client.close()

    async def complete(self, request: ChatRequest) -> ProviderReply:
        async with sdk_errors(openai):
            raw = await self.client.chat.completions.with_raw_response.create(**self._body(request))
            completion = raw.parse()
            if inspect.isawaitable(completion):  # the async raw response parses asynchronously in some SDKs
                completion = await completion
        return _reply(completion, rate_headers_subset(raw.headers))


def _reply(completion: Any, rate_headers: dict[str, str]) -> ProviderReply:
    try:
        choice = min(completion.choices, key=lambda c: c.index)
        text = choice.message.content or ""
        finish = choice.finish_reason or ""
        if getattr(choice.message, "refusal", None):
            finish = "refusal"  # the provider refused: an answer of the model's, scored as given
        more = [(c.message.content or "", "refusal" if getattr(c.message, "refusal", None) else
                 str(c.finish_reason or "")) for c in sorted(completion.choices, key=lambda c: c.index)[1:]]
        usage = completion.usage
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        return ProviderReply(
            text=text,
            model_version=completion.model or "",
            input_tokens=int(usage.prompt_tokens) if usage else 0,   # cached tokens included
            output_tokens=int(usage.completion_tokens) if usage else 0,
            finish_reason=str(finish),
            rate_headers=rate_headers,
            cache_read_tokens=int(getattr(details, "cached_tokens", 0) or 0),
            more=more,
        )
    except (AttributeError, IndexError, TypeError) as exc:
        raise ProviderError("bad_response", f"response without a message: {exc}", retryable=True) from None
