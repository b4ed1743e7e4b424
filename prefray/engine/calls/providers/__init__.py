"""Provider adapters: one file per wire format, each translating and making one call."""

import importlib
from collections.abc import Iterable

from prefray.engine.calls.providers.base import Provider, ProviderError, ProviderReply
from prefray.engine.types import ModelSpec

__all__ = ["Provider", "ProviderError", "ProviderReply", "build_provider", "provider_modules"]

# each provider's adapter: its module (imported on first use: an SDK's import is ~1-2.5 s of CPU) and class
ADAPTERS = {
    "openai": ("prefray.engine.calls.providers.openai_chat", "OpenAIChat"),
    "anthropic": ("prefray.engine.calls.providers.anthropic_messages", "AnthropicMessages"),
}


def build_provider(spec: ModelSpec, api_key: str) -> Provider:
    if spec.provider not in ADAPTERS:
        raise ValueError(f"model '{spec.name}': unknown provider '{spec.provider}' ({' | '.join(ADAPTERS)})")
    module, name = ADAPTERS[spec.provider]
    return getattr(importlib.import_module(module), name)(spec, api_key)


def provider_modules(specs: Iterable[ModelSpec]) -> list[str]:
    """The adapters' modules these models are called through (unknown providers left out)."""
    return sorted({ADAPTERS[spec.provider][0] for spec in specs if spec.provider in ADAPTERS})
