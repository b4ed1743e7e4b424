"""Provider translation details that change what a provider accepts or how a failure is classified."""

from __future__ import annotations

import pytest

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


# -- the wire: bodies sent and answers read as JSON --------------------------------------------
def _ask(provider, request):
    import asyncio

    async def once():
        try:
            return await provider.complete(request)
        finally:
            await provider.close()

    return asyncio.run(once())


@pytest.mark.e2e
def test_both_providers_send_the_body_they_build_and_read_the_answer_and_its_rate_headers(make_fake_server):
    """Through the real SDKs' clients over HTTP to the fake: the body the server received is the one
    built (extra_body merged in, the seed and the schema where each API takes them), and the
    answer's text, tokens and rate headers come back."""
    import json
    import urllib.request

    from prefray.engine.calls.providers import build_provider
    from prefray.engine.config.schema import ModelSpec
    from prefray.engine.types import ChatRequest

    fake_server = make_fake_server("--rpm", "6000")   # a limit, so that the answers carry rate headers
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    request = ChatRequest(messages=({"role": "user", "content": "Name a tea."},), system="Be brief.",
                          params={"max_tokens": 40, "temperature": 0.5, "extra_body": {"top_k_custom": 3}},
                          json_schema=schema, seed=11)
    replies = {}
    for provider, url, model in (("openai", fake_server.openai_url, "fake-model"),
                                 ("anthropic", fake_server.anthropic_url, "fake-claude")):
        spec = ModelSpec(name=provider, provider=provider, model_id=model, base_url=url)
        replies[provider] = _ask(build_provider(spec, "k"), request)
    with urllib.request.urlopen(f"{fake_server.anthropic_url}/requests", timeout=5) as response:
        sent = {body["model"]: body for body in json.loads(response.read())}
    chat, messages = sent["fake-model"], sent["fake-claude"]
    assert chat["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a tea."}]
    assert chat["response_format"]["json_schema"]["schema"] == schema
    assert messages["system"] == "Be brief." and messages["messages"] == [{"role": "user", "content": "Name a tea."}]
    assert messages["output_config"]["format"]["type"] == "json_schema"
    for body in (chat, messages):
        assert (body["seed"], body["temperature"], body["max_tokens"], body["top_k_custom"]) == (11, 0.5, 40, 3)
        assert "extra_body" not in body
    for provider, reply in replies.items():
        assert reply.text and reply.input_tokens > 0 and reply.output_tokens > 0, provider
        assert reply.model_version.startswith("fake-") and reply.finish_reason, provider
        assert any("limit" in name for name in reply.rate_headers), (provider, reply.rate_headers)


def test_answers_are_read_as_the_apis_document_them():
    from prefray.engine.calls.providers.anthropic_messages import read_reply as anthropic_reply
    from prefray.engine.calls.providers.openai_chat import read_reply as openai_reply

    completion = {"model": "gpt-x", "usage": None, "choices": [
        {"index": 2, "message": {"content": None, "refusal": "I can't."}, "finish_reason": "stop"},
        {"index": 0, "message": {"content": "first"}, "finish_reason": "length"},
        {"index": 1, "message": {"content": "second", "refusal": None}, "finish_reason": None}]}
    reply = openai_reply(completion, {"x-ratelimit-limit-requests": "60"})
    assert (reply.text, reply.finish_reason, reply.model_version) == ("first", "length", "gpt-x")
    assert reply.more == [("second", ""), ("", "refusal")]
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens) == (0, 0, 0)
    assert reply.rate_headers == {"x-ratelimit-limit-requests": "60"}
    message = {"model": None, "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 4},
               "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "a"},
                           {"type": "tool_use", "id": "t"}, {"type": "text", "text": "b"}]}
    reply = anthropic_reply(message, {})
    assert (reply.text, reply.finish_reason, reply.model_version) == ("ab", "end_turn", "")
    assert (reply.input_tokens, reply.output_tokens, reply.cache_write_tokens) == (9, 4, 0)


def test_answers_without_a_message_are_bad_responses():
    from prefray.engine.calls.providers.anthropic_messages import read_reply as anthropic_reply
    from prefray.engine.calls.providers.base import ProviderError
    from prefray.engine.calls.providers.openai_chat import read_reply as openai_reply

    broken_completions = [{}, {"choices": []}, {"choices": None}, {"choices": [{"index": 0}]},
                          {"choices": [{"index": 0, "message": None}]}, ["not", "an", "object"]]
    broken_messages = [{}, {"content": None, "usage": {}}, {"content": [{"type": "text"}], "usage": {}},
                       {"content": [], "usage": None}, "text"]
    for read, broken in ((openai_reply, broken_completions), (anthropic_reply, broken_messages)):
        for answer in broken:
            with pytest.raises(ProviderError) as caught:
                read(answer, {})
            assert caught.value.cause == "bad_response" and caught.value.retryable, answer
