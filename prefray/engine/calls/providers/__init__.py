"""Provider adapters: one file per wire format, each translating and making one call."""

from prefray.engine.calls.providers.base import Provider, ProviderError, ProviderReply, build_provider

__all__ = ["Provider", "ProviderError", "ProviderReply", "build_provider"]
