"""Provider adapters: one file per wire format, each translating and making one call."""

from prefray.engine.calls.providers.base import Provider, ProviderError, ProviderReply
from prefray.engine.types import ModelSpec

__all__ = ["Provider", "ProviderError", "ProviderReply", "build_provider"]


def build_provider(spec: ModelSpec, api_key: str) -> Provider:
    if spec.provider == "openai":
        from prefray.engine.calls.providers.openai_chat import OpenAIChat

        return OpenAIChat(spec, api_key)
    if spec.provider == "anthropic":
        from prefray.engine.calls.providers.anthropic_messages import AnthropicMessages

        return AnthropicMessages(spec, api_key)
    raise ValueError(f"model '{spec.name}': unknown provider '{spec.provider}' (openai | anthropic)")
