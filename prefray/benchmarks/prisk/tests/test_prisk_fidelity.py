"""PRISK against the paper: prompts and settings that move published numbers."""

from __future__ import annotations

import re

import pytest

from prefray.benchmarks.prisk.pipeline import PROMPTS
from prefray.engine.prompts import read_prompt


def test_usefulness_prompt_has_no_default_verdict():
    text = read_prompt(PROMPTS, "useful")
    assert not re.search(r"in doubt|if unsure|when uncertain", text, flags=re.IGNORECASE)
    assert "no default either way" in text


# ---------------------------------------------------------------- output budgets (paper App. F)

def test_an_exact_stage_budget_is_sent_as_is():
    from prefray.engine.calls.output_budget import final_request, output_budget
    from prefray.engine.types import ChatRequest, ModelSpec

    claude = ModelSpec(name="c", provider="anthropic", model_id="c", params={"max_tokens": 2048})
    judge = ModelSpec(name="g", provider="openai", model_id="g", params={"max_completion_tokens": 4096})
    thinker = ModelSpec(name="t", provider="openai", model_id="t", params={"max_tokens": 2048}, reasoning_tokens=3000)
    exact = {"exact_output_budget": True}
    assert output_budget(claude, {"max_tokens": 1600}) == ("max_tokens", 2048)          # the engine's default rule
    assert output_budget(claude, {"max_tokens": 1600, **exact}) == ("max_tokens", 1600)
    assert output_budget(judge, {"max_tokens": 512, **exact}) == ("max_completion_tokens", 512)
    assert output_budget(thinker, {"max_tokens": 250, **exact}) == ("max_tokens", 3250)  # room to think stays
    sent = final_request(claude, ChatRequest(messages=(), params={"max_tokens": 250, "temperature": 0.0, **exact}))
    assert sent.params == {"max_tokens": 250, "temperature": 0.0}                     # the control key is not sent


@pytest.mark.e2e
def test_prisk_requests_carry_the_papers_budgets(run_cli, fake_server, tmp_path):
    """Claude Sonnet 4.5 answering and routing, GPT-5.1 judging, both at the fake provider: the
    provider receives 1600 (answers), 250 (routing) and 512 (judge), not the models' 2048 / 4096."""
    run_cli("benchmark=prisk_irp", "condition=retrieval", "model=claude-sonnet-4.5", "judge=gpt-5.1", "limit=1",
            f"model.base_url={fake_server.anthropic_url}", f"judge.base_url={fake_server.openai_url}",
            f"run.dir={tmp_path / 'run'}", "model.rpm=null", "model.tpm=null", "judge.rpm=null", "judge.tpm=null",
            "run.cache=false",
            env={"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-test-anthropic"}, expect_ok=False)
    received = fake_server.stats()["max_tokens_by_model"]
    assert set(received) == {"claude-sonnet-4-5=1600", "claude-sonnet-4-5=250", "gpt-5.1=512"}, received
