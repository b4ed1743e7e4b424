"""Which request parameters a model's `params` may hold: those its provider's SDK takes.

A misspelt or unsupported parameter (`model.params.bogus_param=5`) is refused before anything
starts, naming the provider, instead of ending as a fault on every call. The SDK's own `create`
signature is the list, so a newer SDK's parameters are accepted as soon as it is installed.
"""

from __future__ import annotations

import inspect
from functools import lru_cache

# Arguments of `create` that are not request parameters a model option sets: prefray sets the model,
# the messages and the system prompt of every request and reads answers whole; the HTTP timeout is
# the model's timeout_s; headers and query are the client's.
NOT_PARAMS = frozenset({"self", "model", "messages", "system", "stream", "stream_options", "timeout",
                        "extra_headers", "extra_query"})
# Sent in the request body by prefray's Anthropic provider (the SDK's `create` does not name them).
ANTHROPIC_BODY = frozenset({"temperature", "top_p", "top_k", "seed"})
# Taken by both providers as prefray sends them: no need to load an SDK to accept these.
COMMON = frozenset({"max_tokens", "temperature", "top_p", "seed", "extra_body"})
SDK_CALL = {"openai": "chat.completions.create", "anthropic": "messages.create"}


@lru_cache(maxsize=2)
def accepted(provider: str) -> frozenset[str]:
    """The parameter names `provider`'s SDK takes in a chat request (empty for an unknown provider)."""
    if provider == "openai":
        from openai.resources.chat.completions import AsyncCompletions

        return frozenset(inspect.signature(AsyncCompletions.create).parameters) - NOT_PARAMS
    if provider == "anthropic":
        from anthropic.resources.messages import AsyncMessages

        return (frozenset(inspect.signature(AsyncMessages.create).parameters) | ANTHROPIC_BODY) - NOT_PARAMS
    return frozenset()


def unknown_params(provider: str, names: set[str]) -> list[str]:
    """The names in `names` that `provider`'s SDK does not take, sorted."""
    rest = set(names) - COMMON
    return sorted(rest - accepted(provider)) if rest else []
