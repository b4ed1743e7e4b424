"""Provider translation details that change what a provider accepts or how a failure is classified."""

from __future__ import annotations

from prefray.engine.calls.providers.schema_subset import anthropic_schema, stated_bounds
from prefray.fakellm import answers
from prefray.fakellm.server import _refused_keyword

MATCH_SCHEMA = {
    "type": "object",
    "properties": {"ratings": {"type": "array", "minItems": 3, "maxItems": 3,
                               "items": {"type": "object", "properties": {
                                   "score": {"type": "integer", "minimum": 1, "maximum": 5}}}}},
    "required": ["ratings"],
}


def test_anthropic_schemas_lose_refused_bounds_and_state_them_in_words():
    shaped = anthropic_schema(MATCH_SCHEMA)
    assert _refused_keyword(MATCH_SCHEMA) == "minItems" and _refused_keyword(shaped) is None
    ratings = shaped["properties"]["ratings"]
    assert "minItems" not in ratings and stated_bounds(ratings) == {"minItems": 3, "maxItems": 3}
    score = ratings["items"]["properties"]["score"]
    assert stated_bounds(score) == {"minimum": 1, "maximum": 5}
    assert shaped["additionalProperties"] is False and ratings["items"]["additionalProperties"] is False
    assert MATCH_SCHEMA["properties"]["ratings"]["minItems"] == 3   # the original is left as it was


def test_the_fake_reads_stated_bounds_as_a_model_would():
    for seed in range(20):
        value = answers.answer_json(anthropic_schema(MATCH_SCHEMA), [{"role": "user", "content": "x"}], seed)
        assert len(value["ratings"]) == 3
        assert all(1 <= r["score"] <= 5 for r in value["ratings"])
