"""`model=paper` for CUPID and PRISK: each benchmark's lineup is its paper's list of models (CUPID
Table 8, PRISK App. F "Candidate Models"), with the snapshots, routes and settings the paper states,
and the plan of `model=paper benchmark=all` shows each benchmark's own lineup."""

from __future__ import annotations

import csv

import pytest
from omegaconf import OmegaConf

from prefray.app import catalog
from prefray.app.compose import conf_dir
from prefray.app.sweep import expand, paper_models
from prefray.engine.calls.output_budget import final_request
from prefray.engine.types import ChatRequest, ModelSpec
from tests.test_plan_cli import cli

CONF = conf_dir()
PRISK = ("prisk_irp", "prisk_narrowing", "prisk_sycophancy")

# option -> (model id the provider is sent, endpoint): the paper's model, snapshot and route.
CUPID_TABLE_8 = {
    "gpt-4o": ("gpt-4o-2024-08-06", None),
    "o3-mini-2025-01-31": ("o3-mini-2025-01-31", None),
    "claude-3.7-sonnet-thinking-1024": ("claude-3-7-sonnet-20250219", None),
    "claude-3.5-sonnet-20240620": ("claude-3-5-sonnet-20240620", None),
    "llama-3.1-405b-instruct-turbo-together": ("meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo", "https://api.together.xyz/v1"),
    "mistral-7b-instruct-v0.3-together": ("mistralai/Mistral-7B-Instruct-v0.3", "https://api.together.xyz/v1"),
    "qwen2.5-72b-instruct-turbo-together": ("Qwen/Qwen2.5-72B-Instruct-Turbo", "https://api.together.xyz/v1"),
    "deepseek-r1-together": ("deepseek-ai/DeepSeek-R1", "https://api.together.xyz/v1"),
    "gemini-2.0-flash-thinking-exp-01-21": ("gemini-2.0-flash-thinking-exp-01-21",
                                            "https://generativelanguage.googleapis.com/v1beta/openai/"),
    "gemini-2.0-pro-exp-02-05": ("gemini-2.0-pro-exp-02-05", "https://generativelanguage.googleapis.com/v1beta/openai/"),
}
GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai/"
PRISK_CANDIDATES = {
    "gpt-5.4-2026-03-05": ("gpt-5.4-2026-03-05", None),
    "gpt-5.4-mini-2026-03-17": ("gpt-5.4-mini-2026-03-17", None),
    "claude-sonnet-4.6": ("claude-sonnet-4-6", None),
    "claude-haiku-4.5-20251001": ("claude-haiku-4-5-20251001", None),
    "gemini-2.5-pro": ("gemini-2.5-pro", GEMINI),
    "gemini-2.5-flash": ("gemini-2.5-flash", GEMINI),
    "gemini-2.5-flash-lite": ("gemini-2.5-flash-lite", GEMINI),
    "llama-3.1-8b-instruct-sglang": ("meta-llama/Llama-3.1-8B-Instruct", "http://127.0.0.1:30000/v1"),
    "llama-3.1-70b-instruct-sglang": ("meta-llama/Llama-3.1-70B-Instruct", "http://127.0.0.1:30001/v1"),
    "qwen3-4b-sglang": ("Qwen/Qwen3-4B", "http://127.0.0.1:30002/v1"),
    "qwen3-8b-sglang": ("Qwen/Qwen3-8B", "http://127.0.0.1:30003/v1"),
    "qwen3-14b-sglang": ("Qwen/Qwen3-14B", "http://127.0.0.1:30004/v1"),
    "qwen3-32b-sglang": ("Qwen/Qwen3-32B", "http://127.0.0.1:30005/v1"),
}
LINEUPS = {"cupid": CUPID_TABLE_8, **{b: PRISK_CANDIDATES for b in PRISK}}


def spec(option: str) -> ModelSpec:
    return ModelSpec.from_config(OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{option}.yaml")))


def sent(option: str, benchmark: str, *stage: str) -> dict:
    """The params a request of this stage carries to this model (the runner's one rule)."""
    config = OmegaConf.create(catalog.benchmark_config(benchmark))
    params = OmegaConf.to_container(OmegaConf.select(config, ".".join(stage)))
    return final_request(spec(option), ChatRequest(messages=(), params=params)).params


@pytest.mark.parametrize("benchmark", sorted(LINEUPS))
def test_model_paper_is_the_papers_list_with_its_snapshots_and_routes(benchmark):
    jobs = expand(["model=paper", f"benchmark={benchmark}"], CONF, multirun=True)
    assert [j.model for j in jobs] == paper_models(CONF, benchmark) == list(LINEUPS[benchmark])
    assert {j.judge for j in jobs} == {"gpt-4o" if benchmark == "cupid" else "gpt-5.1"}
    assert {o: (spec(o).model_id, spec(o).base_url) for o in LINEUPS[benchmark]} == LINEUPS[benchmark]


def test_cupid_sends_table_8s_settings():
    # Table 8: temperature 0, except o3-mini ("temperature is not supported") and Claude 3.7 with
    # thinking ("temperature=1 (* only supported setting.)", the provider's default): never sent
    refuses_temperature = {"o3-mini-2025-01-31", "claude-3.7-sonnet-thinking-1024"}
    for option in CUPID_TABLE_8:
        for stage in ("inference", "generation"):
            params = sent(option, "cupid", "params", stage)
            if option in refuses_temperature:
                assert "temperature" not in params, option
            else:
                assert params["temperature"] == 0.0, option
    thinking = spec("claude-3.7-sonnet-thinking-1024").params
    assert thinking["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    # the answer's 1,024 tokens on top of the thinking budget (Anthropic needs max_tokens > budget)
    assert sent("claude-3.7-sonnet-thinking-1024", "cupid", "params", "inference")["max_tokens"] > 1024
    assert "max_completion_tokens" in sent("o3-mini-2025-01-31", "cupid", "params", "inference")


@pytest.mark.parametrize("benchmark", PRISK)
def test_prisk_sends_the_papers_temperature_and_exactly_1600_tokens_to_every_candidate(benchmark):
    # T=0.2 (App. F); narrowing samples "20 times under a temperature of 0.8"
    temperature = 0.8 if benchmark == "prisk_narrowing" else 0.2
    for option in PRISK_CANDIDATES:
        params = sent(option, benchmark, "generation")
        budget = params.get("max_tokens", params.get("max_completion_tokens"))
        assert (params["temperature"], budget) == (temperature, 1600), option
    for option in ("gpt-5.4-2026-03-05", "gpt-5.4-mini-2026-03-17"):
        assert sent(option, benchmark, "generation")["reasoning_effort"] == "none"   # T=0.2 is refused otherwise
    assert not any("thinking" in spec(o).params for o in PRISK_CANDIDATES)


def test_the_plan_of_model_paper_for_all_benchmarks_shows_each_lineup(tmp_path):
    done = cli("prefray.plan", "-m", "model=paper", "benchmark=all", "limit=1", f"run.dir={tmp_path / 'never'}",
               "--csv", str(tmp_path / "plan.csv"))
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "plan.csv") as handle:
        rows = list(csv.DictReader(handle))
    planned: dict[str, set[str]] = {}
    for row in rows:
        if int(row["calls"]) > 0:
            planned.setdefault(row["benchmark"], set()).add(row["model"])
    assert planned == {b: set(paper_models(CONF, b)) for b in ("benchpres", "cupid", *PRISK)}
    assert len(planned["benchpres"]) == 10 and len(planned["cupid"]) == 10 and len(planned["prisk_irp"]) == 13
    for option in (*CUPID_TABLE_8, *PRISK_CANDIDATES):
        assert option in done.stdout
