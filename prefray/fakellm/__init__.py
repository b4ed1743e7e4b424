"""prefray's fake provider server: OpenAI and Anthropic routes with deterministic answers.

Run it with `python -m prefray.fakellm --port 8765`.
"""

from prefray.fakellm.server import FakeOptions, FakeProvider, start

__all__ = ["FakeOptions", "FakeProvider", "start"]
