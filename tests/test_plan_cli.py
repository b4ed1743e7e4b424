"""The headline commands through the real CLI: the whole suite's plan, the keyless quickstart, --help."""

from __future__ import annotations

import csv
import os
import subprocess

import pytest
from omegaconf import OmegaConf

from prefray.app.compose import compose_judge, conf_dir
from prefray.engine.calls.output_budget import final_request
from prefray.engine.calls.pricing import max_output_tokens
from prefray.engine.config import catalog
from prefray.engine.config.sweep import group_options
from prefray.engine.types import ChatRequest, ModelSpec
from tests.conftest import command_here
from tests.test_sweep_cli import DOUBLES, PAPER_JUDGES, benchmark_conditions, evaluated_models

CONF = conf_dir()


def keyless_env() -> dict[str, None]:
    """Every API key variable unset (for command_here's `env`)."""
    return {k: None for k in os.environ if k.endswith("_API_KEY")}


def cli(module: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m prefray.X *args` with no API key set, in this process; Ray is never started."""
    return command_here(module.removeprefix("prefray."), *args, env=keyless_env(), forbid_ray=True)


def model_spec(option: str) -> ModelSpec:
    return ModelSpec.from_config(OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{option}.yaml")))


def budget(spec: ModelSpec, params: dict) -> int:
    """The output budget the runner sends for a stage's params: its one rule, final_request."""
    return max_output_tokens(final_request(spec, ChatRequest(messages=(), params=params)))


@pytest.fixture(scope="module")
def suite_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    done = cli("prefray.plan", "-m", "model=all", "condition=all", "limit=1", f"run.dir={folder / 'never'}",
               "--csv", str(folder / "plan.csv"))
    assert done.returncode == 0, done.stderr
    with open(folder / "plan.csv") as handle:
        return done, list(csv.DictReader(handle))


@pytest.mark.e2e   # the whole suite's plan: minutes of simulation
def test_whole_suite_plan_covers_every_benchmark_condition_and_evaluated_model(suite_plan):
    _, rows = suite_plan
    planned = {(r["benchmark"], r["model"], c) for r in rows if int(r["calls"]) > 0 for c in r["conditions"].split(",")}
    expected = {(b, m, c) for b, conds in benchmark_conditions().items() for c in conds for m in evaluated_models()}
    assert planned == expected
    assert DOUBLES.isdisjoint({r["model"] for r in rows} | {r["answered_by"] for r in rows}
                              | {r["judge"] for r in rows})
    # two options of one model id are two rows
    generate = {r["model"]: r for r in rows if r["benchmark"] == "benchpres" and r["stage"] == "generate"}
    assert generate["gpt-5.2"]["lane"] == generate["gpt-5.2-reasoning"]["lane"]  # one model id, one rate-limit lane
    assert int(generate["gpt-5.2"]["calls"]) == int(generate["gpt-5.2-reasoning"]["calls"]) > 0


@pytest.mark.e2e   # the whole suite's plan: minutes of simulation
def test_whole_suite_plan_names_and_prices_the_paper_judges(suite_plan):
    _, rows = suite_plan
    for benchmark, judge in PAPER_JUDGES.items():
        mine = [r for r in rows if r["benchmark"] == benchmark]
        assert {r["judge"] for r in mine} == {judge}
        scoring = [r for r in mine if r["role"] != "subject"]
        assert {r["answered_by"] for r in scoring if r["role"] == "judge"} == {judge}
        spec = model_spec(judge)
        for row in scoring:
            by_hand = (int(row["input_tokens"]) * spec.price_input_per_mtok
                       + int(row["output_tokens"]) * spec.price_output_per_mtok) / 1e6
            assert float(row["cost_usd"]) == pytest.approx(by_hand) and by_hand > 0


@pytest.mark.e2e   # the whole suite's plan: minutes of simulation
def test_plan_shows_the_output_budget_sent_and_the_lane_bounds(suite_plan):
    done, rows = suite_plan
    generation = catalog.benchmark_config("benchpres")["generation"]
    for option in ("gpt-5.2", "gpt-5.2-reasoning", "qwen3-235b-a22b-thinking"):
        row = next(r for r in rows if (r["benchmark"], r["model"], r["stage"]) == ("benchpres", option, "generate"))
        assert int(row["output_budget"]) == budget(model_spec(option), generation)
    judge = ModelSpec.from_config(compose_judge(["judge=gpt-5.1"], CONF))
    irp = catalog.benchmark_config("prisk_irp")["judge_params"]
    scored = {int(r["output_budget"]) for r in rows if r["benchmark"] == "prisk_irp" and r["role"] == "judge"}
    assert scored == {budget(judge, irp)} == {512}  # PRISK's judge: max_tokens=512
    # each lane's bound: its calls / rpm or input tokens / tpm, over every row on it; the sweep's is the largest
    lanes: dict[str, list[dict]] = {}
    for row in rows:
        lanes.setdefault(row["lane"], []).append(row)
    bounds = {}
    for lane, mine in lanes.items():
        calls, tokens = sum(int(r["calls"]) for r in mine), sum(int(r["input_tokens"]) for r in mine)
        # a self-hosted lane (rpm and tpm null, e.g. the SGLang options) has no bound: inf
        rpm, tpm = float(mine[0]["lane_rpm"] or "inf"), float(mine[0]["lane_tpm"] or "inf")
        bounds[lane] = max(calls / rpm, tokens / tpm)
        assert all(float(r["min_minutes"]) == pytest.approx(bounds[lane]) for r in mine)
    assert f"no less than {max(bounds.values()):.2f} min" in done.stdout


@pytest.mark.e2e   # the whole suite's plan: minutes of simulation
def test_piped_plan_prints_full_values(suite_plan):
    done, rows = suite_plan
    assert "…" not in done.stdout
    for name in ("qwen3-235b-a22b-thinking", "claude-sonnet-4.5", "gpt-5.2-reasoning", "prisk_sycophancy"):
        assert name in done.stdout
    total_jobs = sum(len(c) for c in benchmark_conditions().values()) * len(evaluated_models())
    assert f"{total_jobs} jobs" in done.stdout


def test_quickstart_needs_no_key(tmp_path):
    """The default launch (model local, judged by local) plans and passes preflight with no key set."""
    done = cli("prefray.plan", "limit=2", f"run.dir={tmp_path / 'never'}", "--csv", str(tmp_path / "plan.csv"))
    assert done.returncode == 0, done.stderr
    assert "API key" not in done.stdout + done.stderr
    with open(tmp_path / "plan.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["model"], r["answered_by"], r["judge"]) for r in rows} == {("local", "local", "local")}
    assert not (tmp_path / "never").exists()


def test_quickstart_preflight_asks_for_no_key(monkeypatch):
    from prefray.app.compose import compose_sweep
    from prefray.engine.config.preflight import preflight

    for name in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    _, jobs, benchmarks = compose_sweep(["limit=2"], multirun=False)
    assert [(j.benchmark, j.model.name, j.roles["judge"].name) for j in jobs] == [("benchpres", "local", "local")]
    _, errors = preflight(jobs, benchmarks)
    assert errors == []


def test_help_lists_groups_options_settings_and_entry_points():
    done = cli("prefray.launch", "--help", timeout=120)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # unwrapped
    for group in ("benchmark", "condition", "model", "judge"):
        assert f"{group}:" in text
        for option in group_options(CONF, group):
            assert option in text, f"{group} option {option} missing from --help"
    assert "not in model=all" in text and "fake (fakellm)" in text and "local (embedded)" in text
    for setting in ("limit=null", "run.dir=null", "run.shard_size=null", "run.seed=0", "run.budget_usd=null",
                    "run.cache=true", "run.estimate_output_ratio=0.5"):
        assert setting in text
    for entry in ("prefray.plan", "prefray.rerun", "prefray.rejudge", "prefray.view"):
        assert f"python -m {entry}" in text
