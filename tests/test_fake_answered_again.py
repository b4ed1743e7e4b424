"""The fake provider counts answers to questions it had answered before (a resumed harness's re-sends)."""

from __future__ import annotations

import pytest


@pytest.mark.e2e
def test_the_fake_counts_a_question_answered_again_whatever_else_the_body_carries(fake_server):
    """Asked: q (seed 1), q again with another max_tokens, q with seed 2, r (seed 1), q (seed 1)
    with a schema, and r again. What decides an answer is the model, messages, seed and schema, so
    the repeats are the second q and the second r: 2 of 6 answers were answered before."""
    import openai

    client = openai.OpenAI(api_key="x", base_url=fake_server.openai_url, max_retries=0)
    q = [{"role": "user", "content": "q"}]
    r = [{"role": "user", "content": "r"}]
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
        "additionalProperties": False}}}
    asked = [dict(messages=q, seed=1, max_tokens=64), dict(messages=q, seed=1, max_tokens=32),
             dict(messages=q, seed=2, max_tokens=64), dict(messages=r, seed=1, max_tokens=64),
             dict(messages=q, seed=1, max_tokens=64, response_format=schema), dict(messages=r, seed=1, max_tokens=64)]
    for body in asked:
        client.chat.completions.create(model="fake-model", **body)
    stats = fake_server.stats()
    assert stats["answered"] == 6
    assert stats["answered_again"] == 2
    first, second = stats["answered_again_first_at"]   # when q (seed 1) and r (seed 1) were first answered
    assert first < second
    fake_server.reset()
    client.chat.completions.create(model="fake-model", messages=q, seed=1, max_tokens=64)
    assert fake_server.stats()["answered_again"] == 0      # a reset forgets what was answered


@pytest.mark.e2e
def test_an_answer_whose_caller_hung_up_was_never_given(make_fake_server):
    """The server answers after 1 s; the first caller gives up after 0.2 s (as a killed harness
    does), so asking the same question again is not a repeat; asking a third time is."""
    import openai

    server = make_fake_server("--latency", "1")
    body = dict(model="fake-model", messages=[{"role": "user", "content": "q"}], seed=1, max_tokens=64)
    impatient = openai.OpenAI(api_key="x", base_url=server.openai_url, max_retries=0, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(**body)
    patient = openai.OpenAI(api_key="x", base_url=server.openai_url, max_retries=0, timeout=30)
    patient.chat.completions.create(**body)
    assert server.stats()["answered_again"] == 0
    patient.chat.completions.create(**body)
    assert server.stats()["answered_again"] == 1
