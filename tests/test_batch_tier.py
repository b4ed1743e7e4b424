"""The batch tier: provider batch APIs through the real SDKs, the fake provider and a real Ray cluster.

Metrics must equal the interactive tier's, the ledger must be at the batch price, a killed driver
must collect its batches on relaunch instead of sending them again, and a budget must stop a batch
that would exceed it before it is sent.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.benchmark import Job
from prefray.engine.calls.batch.records import key_of, request_key
from prefray.engine.calls.batch.results import anthropic_line, openai_line
from prefray.engine.calls.batch.tier import TierError, apply_run_tier, batch_priced
from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings
from prefray.engine.rundir import RunDir
from prefray.engine.types import ChatRequest, ModelSpec
from tests.conftest import ROOT, command_here

PRICES = {"fake-model": (1.0, 2.0), "fake-judge": (1.0, 2.0), "fake-claude": (3.0, 15.0),
          "fake-claude-judge": (3.0, 15.0)}  # USD per Mtok in/out, interactive
FAST = ["run.cache=false", "run.batch.max_age_s=0.2", "run.batch.poll_s=0.2", "run.batch.poll_max_s=0.5"]
BENCHPRES = ["benchmark=benchpres", "condition=default", "model=fake", "judge=fake", "limit=2",
             "benchmark.samples=1"]
CUPID = ["benchmark=cupid", "condition=full", "model=fake-anthropic", "judge=fake", "limit=2"]
B, C = BenchmarkSettings("b"), ConditionSettings("c")   # a job's settings, where no stage reads them


def spec(**fields) -> ModelSpec:
    base = dict(name="m", provider="openai", model_id="m", price_input_per_mtok=2.0, price_output_per_mtok=8.0,
                batch_discount=0.5)
    return ModelSpec(**{**base, **fields})


def rows(run_dir: Path) -> list[dict]:
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


def read_csv(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def batch_dollars(stats: dict) -> float:
    """What the fake provider's batch answers cost at half the interactive price, from its own counts."""
    spent = 0.0
    for model, tokens_in in stats["batch_input_tokens_by_model"].items():
        price_in, price_out = PRICES[model]
        spent += 0.5 * (tokens_in * price_in + stats["batch_output_tokens_by_model"][model] * price_out) / 1e6
    return spent


def overrides(server, anthropic: bool = False) -> list[str]:
    model_url = server.anthropic_url if anthropic else server.openai_url
    return [f"model.base_url={model_url}", f"judge.base_url={server.openai_url}"]


# -- pure parts ---------------------------------------------------------------------------------
def test_batch_price_and_tier_settings():
    priced = batch_priced(spec())
    assert (priced.price_input_per_mtok, priced.price_output_per_mtok) == (1.0, 4.0)
    job = Job("b", "c", spec(), {"judge": spec(name="j")}, B, C)
    both = apply_run_tier(job, {"tier": "batch"})
    assert both.model.tier == "batch" and both.roles["judge"].tier == "batch"
    assert apply_run_tier(job, {"tier": None}).model.tier == "interactive"
    with pytest.raises(TierError, match="batch API"):
        apply_run_tier(Job("b", "c", spec(batch_discount=None), {"judge": spec()}, B, C), {"tier": "batch"})
    with pytest.raises(TierError, match="run.tier"):
        apply_run_tier(job, {"tier": "later"})
    with pytest.raises(TierError, match="run.batch"):
        apply_run_tier(job, {"batch": {"max_requests": 0}})


def test_plan_shows_both_tiers_per_model():
    import pyarrow as pa

    from prefray.engine.calls.batch.plan import tier_lines

    subject, judge = spec(name="s", model_id="s", rpm=60), spec(name="j", model_id="j", tier="batch")
    rows = pa.table({"provider": ["openai"] * 4, "model_id": ["s", "s", "j", "j"],
                     "cached": [False, True, False, False],
                     "input_tokens": [1000, 1000, 2000, 3000], "output_tokens": [100, 100, 200, 300]})
    judged, answered = tier_lines(rows, [Job("b", "c", subject, {"judge": judge}, B, C)])
    assert (judged.tier, judged.calls) == ("batch", 2) and "24 h" in judged.expected_latency
    assert judged.interactive_usd == pytest.approx((5000 * 2.0 + 500 * 8.0) / 1e6)
    assert judged.batch_usd == pytest.approx(judged.interactive_usd / 2)
    assert (answered.tier, answered.calls) == ("interactive", 1)  # the cached answer costs nothing
    assert answered.expected_latency.startswith(">= 0.0 min")


def test_request_identity_is_computable_from_a_stored_row():
    request = ChatRequest(messages=({"role": "user", "content": "hi"},), params={"max_tokens": 9}, seed=3)
    model = spec()
    assert key_of(model, request) == request_key("openai", request.prompt_hash("m"), 3)
    assert key_of(model, request) != key_of(model, ChatRequest(messages=request.messages, params=request.params,
                                                               seed=4))


def test_result_lines_become_results_like_interactive_calls():
    model = spec()
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m-v1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "cut"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}}
    ok = openai_line(model, {"custom_id": "a", "response": {"status_code": 200, "body": body}}, 10.0, 12.0)
    assert (ok.status, ok.text, ok.model_version, ok.finish_reason, ok.truncated) == (
        "ok", "cut", "m-v1", "length", True)
    assert ok.cost_usd == pytest.approx((1000 * 1.0 + 500 * 4.0) / 1e6)  # half of 2.0 / 8.0 per Mtok
    assert (ok.latency_s, ok.tries) == (2.0, 1)
    server = openai_line(model, {"custom_id": "a",
                                 "response": {"status_code": 500, "body": {"error": {"message": "x"}}}}, 0, 1)
    assert (server.status, server.cause) == ("failed", "server_error")
    too_long = openai_line(model, {"custom_id": "a", "response": {"status_code": 400, "body": {
        "error": {"message": "maximum context length is 8", "code": "context_length_exceeded"}}}}, 0, 1)
    assert too_long.cause == "context_overflow"
    expired = openai_line(model, {"custom_id": "a", "error": {"code": "batch_expired", "message": "late"}}, 0, 1)
    assert (expired.status, expired.cause) == ("failed", "timeout")

    message = {"id": "m", "type": "message", "role": "assistant", "model": "c-v1", "stop_reason": "end_turn",
               "stop_sequence": None, "content": [{"type": "text", "text": "fine"}],
               "usage": {"input_tokens": 10, "output_tokens": 20}}
    good = anthropic_line(model, {"custom_id": "a", "result": {"type": "succeeded", "message": message}}, 0, 1)
    assert (good.status, good.text, good.finish_reason, good.truncated) == ("ok", "fine", "end_turn", False)
    assert good.cost_usd == pytest.approx((10 * 1.0 + 20 * 4.0) / 1e6)
    limited = anthropic_line(model, {"custom_id": "a", "result": {"type": "errored", "error": {
        "type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}}}, 0, 1)
    assert limited.cause == "rate_limit"
    assert anthropic_line(model, {"custom_id": "a", "result": {"type": "expired"}}, 0, 1).cause == "timeout"
    assert anthropic_line(model, {"custom_id": "a", "result": {"type": "canceled"}}, 0, 1).cause == "server_error"


# -- end to end ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def interactive_metrics(ray_address, session_fake_server, tmp_path_factory) -> dict[str, str]:
    """metrics.csv of the BenchPreS and CUPID sweeps in the interactive tier (the reference)."""
    from tests.conftest import launch_here

    server = session_fake_server
    server.reset()
    out = {}
    for name, args, anthropic in (("benchpres", BENCHPRES, False), ("cupid", CUPID, True)):
        run_dir = tmp_path_factory.mktemp("interactive") / name
        done = launch_here(*args, *overrides(server, anthropic), *FAST, "run.plots=false", f"run.dir={run_dir}")
        assert done.returncode == 0, done.stderr
        out[name] = (run_dir / "metrics.csv").read_text()
    assert server.stats()["batches_created"] == 0
    return out


def _check_ledger_at_batch_price(run_dir: Path, stats: dict) -> None:
    stored = rows(run_dir)
    # every unit answered; the fake's free text fails CUPID's inference format in both tiers alike
    assert stored and all(r["status"] == "ok" or r["cause"] == "parse_error" for r in stored)
    ledger = sum(float(r["cost_usd"]) for r in read_csv(run_dir / "costs.csv"))
    assert ledger == pytest.approx(batch_dollars(stats), rel=1e-9, abs=1e-12)
    assert stats["requests"] == 0  # nothing went through the interactive routes


@pytest.mark.e2e
def test_benchpres_batch_tier_matches_interactive_at_half_price(run_cli, make_fake_server, tmp_path,
                                                                interactive_metrics):
    server = make_fake_server("--batch-delay", "0.3")
    run_dir = tmp_path / "batch"
    run_cli(*BENCHPRES, *overrides(server), *FAST, "run.tier=batch", f"run.dir={run_dir}")
    stats = server.stats()
    assert (run_dir / "metrics.csv").read_text() == interactive_metrics["benchpres"]
    _check_ledger_at_batch_price(run_dir, stats)
    assert stats["batches_by_api"] == {"openai": stats["batches_created"]} and stats["batch_repeated_requests"] == 0
    records = [json.loads(p.read_text()) for p in (run_dir / "batches").glob("*.json")]
    assert len(records) == stats["batches_created"] and all(r["status"] == "completed" for r in records)


@pytest.mark.e2e
def test_cupid_batch_tier_per_model_matches_interactive(run_cli, make_fake_server, tmp_path, interactive_metrics):
    server = make_fake_server("--batch-delay", "0.3")
    run_dir = tmp_path / "batch"
    run_cli(*CUPID, *overrides(server, anthropic=True), *FAST, "model.tier=batch", "judge.tier=batch",
            "run.batch.max_requests=1", f"run.dir={run_dir}")
    stats = server.stats()
    assert (run_dir / "metrics.csv").read_text() == interactive_metrics["cupid"]
    _check_ledger_at_batch_price(run_dir, stats)
    sizes = [len(json.loads(p.read_text())["entries"]) for p in (run_dir / "batches").glob("*.json")]
    assert sizes and set(sizes) == {1} and len(sizes) == stats["batch_requests"]  # size threshold: 1 a batch
    assert set(stats["batches_by_api"]) == {"openai", "anthropic"}  # Anthropic answers, OpenAI-side judge


@pytest.mark.e2e
def test_killed_driver_collects_its_batches_on_relaunch(run_cli, make_fake_server, tmp_path, interactive_metrics):
    server = make_fake_server("--batch-delay", "6")
    run_dir = tmp_path / "run"
    args = [*BENCHPRES, *overrides(server), *FAST, "run.tier=batch", "run.plots=false", f"run.dir={run_dir}"]
    driver = subprocess.Popen([sys.executable, "-m", "prefray.launch", *args], cwd=ROOT, env=dict(os.environ),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not list((run_dir / "batches").glob("*.json")):
            assert time.time() < deadline and driver.poll() is None, "no batch was recorded"
            time.sleep(0.1)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    before = server.stats()
    assert before["batches_created"] == 1 and before["batch_results_read"] == 0  # killed while in progress
    first = next((run_dir / "batches").glob("*.json"))
    assert json.loads(first.read_text())["results"] is None

    run_cli(*args)
    after = server.stats()
    assert after["batch_repeated_requests"] == 0  # no request was sent in a batch twice
    assert after["batch_answered"] == after["batch_requests"] == len(rows(run_dir))  # each paid once, each stored
    assert json.loads(first.read_text())["status"] == "completed"
    assert (run_dir / "metrics.csv").read_text() == interactive_metrics["benchpres"]
    _check_ledger_at_batch_price(run_dir, after)


@pytest.mark.e2e
def test_budget_closes_before_a_batch_that_would_exceed_it(run_cli, make_fake_server, tmp_path):
    from prefray.engine.calls.pricing import max_call_cost
    from prefray.engine.results.request_store import read_requests

    server = make_fake_server()
    probe = tmp_path / "probe"
    run_cli(*BENCHPRES, *overrides(server), *FAST, "run.tier=batch", f"run.dir={probe}")
    fake = ModelSpec.from_config({**_fake_config(), "tier": "batch"})
    sent = {r["request_hash"]: r for r in read_requests(RunDir(probe)).to_pylist()}
    most: dict[str, float] = {}
    for row in rows(probe):
        request = sent[row["request_hash"]]
        chat = ChatRequest(messages=tuple(json.loads(request["messages_json"])), system=request["system"],
                           params=json.loads(request["params_json"]),
                           json_schema=json.loads(request["json_schema_json"]) if request["json_schema_json"] else None)
        most[row["stage"]] = most.get(row["stage"], 0.0) + max_call_cost(batch_priced(fake), chat)
    spent_generating = sum(r["cost_usd"] for r in rows(probe) if r["stage"] == "generate")
    budget = most.pop("generate") * (1 + 1e-9)
    # stages run generate → judge → completeness: the judge batch cannot fit after generation, and a
    # refused reservation closes the budget for every later batch
    assert spent_generating + most["judge"] > budget
    server.reset()

    run_dir = tmp_path / "run"
    run_cli(*BENCHPRES, *overrides(server), *FAST, "run.tier=batch", f"run.dir={run_dir}", f"run.budget_usd={budget}",
            expect_code=3)
    stats = server.stats()
    assert stats["batches_created"] == 1  # generation only: the judges' batch was never sent
    stored = rows(run_dir)
    assert all(r["status"] == "ok" for r in stored if r["stage"] == "generate")
    judged = [r for r in stored if r["stage"] != "generate"]
    assert judged and {(r["status"], r["cause"]) for r in judged} == {("skipped", "budget")}
    assert sum(r["cost_usd"] for r in stored) == pytest.approx(batch_dollars(stats)) and batch_dollars(stats) <= budget


def _fake_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "conf" / "model" / "fake.yaml").read_text())


@pytest.mark.e2e
def test_failed_and_expired_batch_requests_are_rows_with_causes_that_rerun_finishes(
        run_cli, make_fake_server, tmp_path, interactive_metrics):
    server = make_fake_server("--batch-fail-rate", "0.3", "--batch-expire-first", "1")
    run_dir = tmp_path / "run"
    run_cli(*BENCHPRES, *overrides(server), *FAST, "run.tier=batch", f"run.dir={run_dir}", expect_code=3)
    first = rows(run_dir)
    assert {(r["stage"], r["status"], r["cause"]) for r in first} == {("generate", "failed", "timeout")}
    assert all("expired" in r["error"] for r in first)  # the first batch expired: nothing answered, nothing paid
    assert sum(r["cost_usd"] for r in first) == 0

    causes = set()
    for _ in range(3):  # units first sent by a rerun meet the fake's first-arrival failures too
        done = command_here("rerun", str(run_dir), *FAST[1:])
        assert done.returncode in (0, 3), done.stderr   # 3: some units still without an answer
        causes |= {r["cause"] for r in rows(run_dir) if r["status"] == "failed"}
    assert done.returncode == 0, done.stderr
    assert "server_error" in causes  # per-request failures were stored with their cause, then rerun
    stats = server.stats()
    stored = rows(run_dir)
    assert stats["batch_answered"] == sum(r["status"] == "ok" for r in stored)  # each answer paid once
    assert (run_dir / "metrics.csv").read_text() == interactive_metrics["benchpres"]
    ledger = sum(float(r["cost_usd"]) for r in read_csv(run_dir / "costs.csv"))
    assert ledger == pytest.approx(batch_dollars(stats), rel=1e-9)
