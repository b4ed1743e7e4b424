"""How answers end: the output budget rule, truncation, true causes and the failure policy classes.

Budgets and classes go through the real CLI, a real Ray cluster and the fake provider over HTTP.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.calls.output_budget import final_request, output_budget
from prefray.engine.results.request_store import read_requests
from prefray.engine.rundir import RunDir
from prefray.engine.types import ChatRequest, ModelSpec
from tests.conftest import free_port

ONE_UNIT = ["benchmark=benchpres", "condition=default", "limit=1", "benchmark.samples=1", "run.cache=false"]


def spec(**fields) -> ModelSpec:
    return ModelSpec(name="m", provider="openai", model_id="m", **fields)


def rows(run_dir: Path) -> list[dict]:
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


def metrics(run_dir: Path) -> dict[tuple[str, str, str], dict]:
    with open(run_dir / "metrics.csv") as handle:
        return {(r["model"], r["judge"], r["metric"]): r for r in csv.DictReader(handle)}


def count(run_dir: Path, metric: str) -> int:
    """A failure-class count of the cell (the same under every judge of the cell)."""
    with open(run_dir / "metrics.csv") as handle:
        values = {int(float(r["value"])) for r in csv.DictReader(handle) if r["metric"] == metric}
    assert len(values) == 1, (metric, values)
    return values.pop()


# -- the rule, by hand -------------------------------------------------------------------------
def test_a_reasoning_model_keeps_its_own_budget_over_a_short_stage():
    reasoning = spec(params={"max_completion_tokens": 16384}, reasoning_tokens=8192)
    assert output_budget(reasoning, {"max_tokens": 1024}) == ("max_completion_tokens", 16384)
    sent = final_request(reasoning, ChatRequest(messages=(), params={"max_tokens": 1024, "temperature": 1.0}))
    assert sent.params == {"max_completion_tokens": 16384, "temperature": 1.0}


def test_stage_plus_reasoning_wins_when_larger_and_the_model_cap_bounds_it():
    thinker = spec(params={"max_tokens": 2048}, reasoning_tokens=3072)
    assert output_budget(thinker, {"max_tokens": 256}) == ("max_tokens", 3328)       # 256 + 3072 > 2048
    capped = spec(params={"max_tokens": 2048}, reasoning_tokens=3072, max_output_tokens=1000)
    assert output_budget(capped, {"max_tokens": 256}) == ("max_tokens", 1000)
    plain = spec(params={})
    assert output_budget(plain, {"max_tokens": 300}) == ("max_tokens", 300)
    assert output_budget(plain, {}) is None
    assert output_budget(spec(params={"max_tokens": 512}), {}) == ("max_tokens", 512)


# -- budgets as the provider receives them ------------------------------------------------------
@pytest.mark.e2e
def test_paper_models_receive_their_own_budgets(run_cli, fake_server, tmp_path):
    """gpt-5.2-reasoning generating and deepseek-r1 judging, both pointed at the fake provider."""
    run_cli("model=gpt-5.2-reasoning", "judge=deepseek-r1", *ONE_UNIT, *fake_server.model_overrides(),
            f"run.dir={tmp_path / 'run'}", "model.rpm=null", "model.tpm=null", "judge.rpm=null", "judge.tpm=null",
            env={"OPENAI_API_KEY": "sk-test-openai", "OPENROUTER_API_KEY": "sk-test-router"}, expect_ok=False)
    received = fake_server.stats()["max_tokens_by_model"]
    assert received.get("gpt-5.2=16384", 0) >= 1, received
    assert received.get("deepseek/deepseek-r1=4096", 0) >= 1, received
    assert set(received) == {"gpt-5.2=16384", "deepseek/deepseek-r1=4096"}, received


# -- truncation ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cut_run(ray_address, session_fake_server, tmp_path_factory) -> Path:
    """One unit whose answers are cut (4 tokens) and whose judges cannot answer (2 tokens): the cut
    answer is still judged, and each unreadable verdict is the judge's failure."""
    from tests.conftest import launch_here

    session_fake_server.reset()
    run = tmp_path_factory.mktemp("cut") / "run"
    done = launch_here("model=fake", "judge=fake", *ONE_UNIT, *session_fake_server.model_overrides(),
                       "model.max_output_tokens=4", "judge.max_output_tokens=2", "run.plots=false", f"run.dir={run}")
    assert done.returncode in (0, 3), done.stderr
    return run


@pytest.mark.e2e
def test_a_cut_answer_is_flagged_judged_and_counted(cut_run):
    run = cut_run
    stored = rows(run)
    generations = [r for r in stored if r["role"] == "subject" and r["status"] == "ok"]
    assert generations and all(r["truncated"] and r["finish_reason"] == "length" for r in generations)
    assert all(len(r["text"]) <= 16 for r in generations)
    judged = {(r["instance_id"], r["sample"]) for r in stored if r["role"] != "subject"}
    assert {(r["instance_id"], r["sample"]) for r in generations} <= judged   # scored as given
    share = metrics(run)[("fake", "", "truncated_share")]
    assert float(share["value"]) == 1.0 and int(share["n"]) == len(generations)
    assert "Truncated answers" in (run / "metrics.md").read_text()


# -- one unit per failure class -----------------------------------------------------------------
@pytest.mark.e2e
def test_an_unreachable_provider_is_a_connection_failure_with_no_answer(run_cli, fake_server, tmp_path):
    run = tmp_path / "run"
    closed = f"http://127.0.0.1:{free_port()}/v1"
    done = run_cli("model=fake", "judge=fake", *ONE_UNIT, f"model.base_url={closed}", "model.serve=null",
                   f"judge.base_url={fake_server.openai_url}", "model.max_attempts=1", f"run.dir={run}",
                   expect_ok=False)
    assert done.returncode != 2, done.stderr
    failed = [r for r in rows(run) if r["role"] == "subject"]
    assert failed and {r["cause"] for r in failed} == {"connection"}
    got = metrics(run)
    assert count(run, "failures_no_answer") == len(failed)
    assert {r["complete"] for r in got.values()} == {"false"}


@pytest.mark.e2e
def test_a_prompt_over_the_context_is_the_models_failure_and_keeps_the_cell_complete(run_cli, make_fake_server,
                                                                                     tmp_path):
    server = make_fake_server("--context-tokens", "20")
    run = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *ONE_UNIT, *server.model_overrides(), f"run.dir={run}", expect_ok=False)
    subject = [r for r in rows(run) if r["role"] == "subject"]
    assert subject and {r["cause"] for r in subject} == {"context_overflow"}
    assert all(r["tries"] == 1 for r in subject)   # not retried: the same prompt cannot fit later
    got = metrics(run)
    assert count(run, "failures_model") == len(subject)
    assert count(run, "failures_no_answer") == 0
    assert {r["complete"] for r in got.values()} == {"true"}


@pytest.mark.e2e
def test_an_unreadable_judge_is_excluded_and_counted_per_judge(cut_run):
    run = cut_run
    judged = [r for r in rows(run) if r["role"] != "subject"]
    assert judged and {r["cause"] for r in judged} == {"parse_error"}
    assert all(r["tries"] == 2 for r in judged)   # asked once more, then given up
    assert count(run, "failures_judge") == len(judged)


# -- what was sent is kept ----------------------------------------------------------------------
@pytest.mark.e2e
def test_every_row_links_to_the_request_that_was_sent(run_cli, fake_server, tmp_path):
    run = tmp_path / "run"
    run_cli("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=1",
            "benchmark.samples=3", "run.cache=false", *fake_server.model_overrides(), f"run.dir={run}")
    stored = rows(run)
    requests = {r["request_hash"]: r for r in read_requests(RunDir(run)).to_pylist()}
    assert {r["request_hash"] for r in stored} <= set(requests)
    generations = [r for r in stored if r["stage"] == "generate"] or [r for r in stored if r["role"] == "subject"]
    samples_per_prompt = {}
    for row in generations:
        samples_per_prompt.setdefault(row["request_hash"], set()).add(row["sample"])
    assert max(len(s) for s in samples_per_prompt.values()) == 3   # three samples, one stored copy
    one = requests[generations[0]["request_hash"]]
    assert json.loads(one["messages_json"])[-1]["role"] == "user"
    assert len(requests) == len(set(requests))


# -- stages stream --------------------------------------------------------------------------------
@pytest.mark.e2e
def test_judging_starts_before_the_last_answer_of_its_job(run_cli, make_fake_server, tmp_path):
    # generation lasts ~6 s: longer than the judge's gateway process takes to start beside it
    server = make_fake_server("--latency", "1.0")
    run = tmp_path / "run"
    run_cli("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=4", "run.cache=false",
            "run.shard_size=2", "model.max_concurrency=2", *server.model_overrides(), f"run.dir={run}")
    stored = rows(run)
    last_answer = max(r["finished_at"] for r in stored if r["stage"] == "generate")
    first_verdict = min(r["started_at"] for r in stored if r["stage"] == "judge")
    first_score = min(r["started_at"] for r in stored if r["stage"] == "completeness")
    assert first_verdict < last_answer and first_score < last_answer

