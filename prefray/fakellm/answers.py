"""The fake server's answers: the engine's synthetic answer rule (engine/calls/providers/synthetic.py,
where the rule is documented), which the dry run answers with too. Tests compute expected metrics
from these functions."""

from prefray.engine.calls.providers.synthetic import (
    answer_json,
    answer_key,
    answer_text,
    boolean_at,
    content_text,
    count_tokens,
    last_user_message,
    render_json,
)

__all__ = ["answer_json", "answer_key", "answer_text", "boolean_at", "content_text", "count_tokens",
           "last_user_message", "render_json"]
