"""CUPID's PrefMatcher-7B scorer option: composed for the matcher role only, pointed at an
OpenAI-compatible endpoint from the environment, and its answers (a bare JSON list) read."""

from __future__ import annotations

import json

import pytest

from prefray.app.compose import SweepError, build_job, compose_configs, conf_dir
from prefray.app.sweep import all_options, expand
from prefray.benchmarks.cupid.scoring import parse_match
from prefray.benchmarks.cupid.tests.test_cupid_prompts import INFER_MARK, fake_requests, write

CONF = conf_dir()
CUPID = ["benchmark=cupid", "condition=oracle", "model=fake", "judge=fake"]


def job_with(*overrides: str):
    return build_job(compose_configs(expand([*CUPID, *overrides], CONF, multirun=False), CONF)[0], CONF)


def test_the_option_composes_for_the_matcher_role_with_its_endpoint_from_the_environment(monkeypatch):
    monkeypatch.delenv("PREFMATCHER_BASE_URL", raising=False)
    monkeypatch.delenv("PREFMATCHER_MODEL", raising=False)
    job = job_with("benchmark.roles.matcher=prefmatcher-7b")
    matcher = job.role_model("matcher")
    assert (matcher.name, matcher.provider, matcher.model_id) == ("prefmatcher-7b", "openai", "kixlab/prefmatcher-7b")
    assert matcher.base_url == "http://127.0.0.1:8000/v1" and matcher.api_key_env == "PREFMATCHER_API_KEY"
    assert job.role_model("decomposer").name == "fake" and job.role_model("judge").model_id == "fake-judge"
    monkeypatch.setenv("PREFMATCHER_BASE_URL", "http://gpu-box:9000/v1")
    monkeypatch.setenv("PREFMATCHER_MODEL", "prefmatcher")
    matcher = job_with("benchmark.roles.matcher=prefmatcher-7b").role_model("matcher")
    assert (matcher.base_url, matcher.model_id) == ("http://gpu-box:9000/v1", "prefmatcher")
    # a scorer option is never swept as an evaluated model
    assert "prefmatcher-7b" not in all_options(CONF, "model")
    with pytest.raises(SweepError, match="unknown model or scorer option 'prefmatcher-8b'"):
        job_with("benchmark.roles.matcher=prefmatcher-8b")


def test_a_bare_list_of_results_is_read():
    answer = json.dumps([{"index": 1, "entry": "a?", "label": "Fully Covered"},
                         {"index": 2, "entry": "b?", "label": "Partially Covered"},
                         {"index": 3, "entry": "c?", "label": "Not Covered"}])
    assert parse_match(answer) == {"scores": [1.0, 0.5, 0.0]}
    assert parse_match(f"```json\n{answer}\n```") == {"scores": [1.0, 0.5, 0.0]}


@pytest.mark.e2e
def test_a_launch_sends_every_matcher_call_to_the_prefmatcher_endpoint(run_cli, fake_server, tmp_path):
    # readable inferences (marked sections in the prompt the fake echoes), so the matcher is called
    lines = [f"<preference>Variant {k}: answers must put the key figure in the first line.</preference>"
             for k in range(200)]
    infer = write(tmp_path / "infer.txt", f"{INFER_MARK}\n{{log}}\n{{request}}\n" + "\n".join(lines) + "\n")
    env = {"PREFMATCHER_BASE_URL": fake_server.openai_url, "PREFMATCHER_MODEL": "prefmatcher-served",
           "PREFMATCHER_API_KEY": "EMPTY"}
    run_cli(*CUPID, *fake_server.model_overrides(), "benchmark.roles.matcher=prefmatcher-7b",
            f"benchmark.prompts.infer={infer}", f"run.dir={tmp_path / 'run'}", "limit=3", "run.progress=false",
            env=env)
    bodies = fake_requests(fake_server)
    matcher = [b for b in bodies if "results" in json.dumps(b.get("response_format") or {})]
    others = [b for b in bodies if b not in matcher]
    assert matcher and {b["model"] for b in matcher} == {"prefmatcher-served"}
    assert "prefmatcher-served" not in {b["model"] for b in others}
    assert {b["model"] for b in others} == {"fake-model", "fake-judge"}  # subject; decomposer and judge
