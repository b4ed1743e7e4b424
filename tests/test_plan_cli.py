"""The headline commands through the real CLI: the whole suite's plan, the keyless quickstart, --help;
and the counting plan against the simulated dry run it replaces by default."""

from __future__ import annotations

import csv
import os
import subprocess

import pytest
from omegaconf import OmegaConf

from prefray.app import catalog
from prefray.app.compose import compose_judge, conf_dir
from prefray.app.sweep import group_options
from prefray.engine.calls.output_budget import final_request
from prefray.engine.calls.pricing import max_output_tokens
from prefray.engine.rundir import RunDir
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
    """The whole suite's counting plan (in this process: no Ray, no shards)."""
    folder = tmp_path_factory.mktemp("plan")
    done = cli("prefray.plan", "-m", "model=all", "condition=all", "limit=1", f"run.dir={folder / 'never'}",
               "--csv", str(folder / "plan.csv"))
    assert done.returncode == 0, done.stderr
    with open(folder / "plan.csv") as handle:
        return done, list(csv.DictReader(handle))


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
    from prefray.app.preflight import preflight

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
    for entry in ("plan", "rerun", "rejudge", "view"):
        assert f"prefray {entry}" in text


# --- the counting plan against the simulation -------------------------------------------------
# The counting plan and the simulated dry run must agree on calls per plan row exactly, and on
# tokens within TOKEN_TOLERANCE (relative). At the cross-check's size every prompt is measured, so
# they agree exactly; the tolerance is what the docs promise (docs/cost.md).
TOKEN_TOLERANCE = 0.01
# Every benchmark and condition (every stage type: streaming judges, joined inputs, parsed and free
# text answers, stages built from all earlier ones) at the smallest size that builds them all.
CROSS_CHECK = ["benchmark=all", "condition=all", "model=fake", "judge=fake", "limit=2"]


def planned(overrides: list[str], run_dir, simulated: bool, cache=None, jobs_and_data=None) -> dict:
    """(benchmark, model, stage, answered_by) → (calls, cached, input tokens, output tokens)."""
    from prefray.app.compose import compose_sweep
    from prefray.app.plan import plan_rows
    from prefray.app.preflight import load_datasets
    from prefray.engine.money.estimate import summarize
    from prefray.engine.sweep import Sweep

    _, jobs, benchmarks = compose_sweep(overrides, multirun=True)
    instances, errors = load_datasets(jobs, benchmarks)
    assert not errors
    rows = plan_rows(Sweep.assemble(jobs, benchmarks, instances, RunDir(run_dir)), cache, simulated)
    return {(x.benchmark, x.model, x.stage, x.answered_by): (x.calls, x.cached, x.input_tokens, x.output_tokens)
            for x in summarize(rows, jobs)}


def assert_agree(counted: dict, simulated: dict) -> None:
    assert counted.keys() == simulated.keys()
    for key, (calls, cached, tokens_in, tokens_out) in simulated.items():
        got = counted[key]
        assert got[:2] == (calls, cached), key
        assert abs(got[2] - tokens_in) <= TOKEN_TOLERANCE * tokens_in, key
        assert abs(got[3] - tokens_out) <= TOKEN_TOLERANCE * tokens_out, key


@pytest.fixture(scope="module")
def cross_check(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cross") / "never"
    return planned(CROSS_CHECK, run_dir, simulated=False), planned(CROSS_CHECK, run_dir, simulated=True)


def test_counting_plan_agrees_with_the_simulation_on_every_benchmark(cross_check):
    counted, simulated = cross_check
    assert {key[0] for key in simulated} == {"benchpres", "cupid", "prisk_irp", "prisk_narrowing",
                                             "prisk_sycophancy"}
    assert sum(c[0] for c in simulated.values()) > 1000
    assert_agree(counted, simulated)


def test_counting_plan_resumes_from_the_run_dir_and_answers_from_the_cache(tmp_path):
    """A run dir holding limit=1's rows and a response cache holding its answers: the plan of limit=2
    sends only the second instance's units, counted from the run's own shards and cache, as the
    simulation does."""
    import asyncio

    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets
    from prefray.engine.flow.dryrun import SimulatedGateways
    from prefray.engine.flow.runner import JobRunner, Outlets, run_jobs
    from prefray.engine.rundir.cache import ResponseCache
    from prefray.engine.sweep import Sweep

    sweep = ["benchmark=benchpres,prisk_sycophancy", "condition=profile,default", "model=fake", "judge=fake"]
    _, jobs, benchmarks = compose_sweep([*sweep, "limit=1"], multirun=True)
    instances, _ = load_datasets(jobs, benchmarks)
    cache = ResponseCache(tmp_path / "cache" / "responses.sqlite")
    stored = tmp_path / "stored"
    run = Sweep.assemble(jobs, benchmarks, instances, RunDir(stored))
    answers = SimulatedGateways()
    outlets = Outlets.of(RunDir(stored), cache=cache)
    asyncio.run(run_jobs([JobRunner(prepared, run, outlets, answers) for prepared in run.jobs]))
    resumed = planned([*sweep, "limit=2"], stored, simulated=False)
    assert_agree(resumed, planned([*sweep, "limit=2"], stored, simulated=True))
    fresh = planned([*sweep, "limit=2"], tmp_path / "fresh", simulated=False)
    assert all(resumed[k][0] < fresh[k][0] for k in fresh)   # the stored units are not sent again
    # fake-anthropic's answers are not in the cache: its jobs are counted apart from fake's
    both = [*sweep[:2], "model=fake,fake-anthropic", "judge=fake", "limit=2"]
    from_cache = planned(both, tmp_path / "other", simulated=False, cache=cache)
    assert_agree(from_cache, planned(both, tmp_path / "other", simulated=True, cache=cache))
    assert all(from_cache[k][1] > 0 for k in fresh)   # every stage of fake's has cached answers
    assert all(from_cache[k][0] + from_cache[k][1] == fresh[k][0] for k in fresh)
    assert all(from_cache[k][1] == 0 for k in from_cache if k[1] == "fake-anthropic" and k[3] != "fake")


def test_models_of_another_output_budget_are_counted_on_a_sample(monkeypatch, tmp_path):
    """Jobs that share a cell's count get what counting each alone gives; a model with another output
    budget takes the cell's calls and its tokens from a sample of instances (within 15% here: one
    instance of three)."""
    from dataclasses import replace

    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets
    from prefray.engine.flow import counting
    from prefray.engine.money.estimate import summarize
    from prefray.engine.sweep import Sweep

    _, (job,), benchmarks = compose_sweep(["benchmark=benchpres", "model=fake", "judge=fake", "limit=3"], True)
    instances, _ = load_datasets([job], benchmarks)
    same = replace(job, model=replace(job.model, name="same-budget", params={**job.model.params, "temperature": 1}))
    longer = replace(job, model=replace(job.model, name="longer", params={"max_tokens": 4096}))
    jobs = [job, same, longer]
    data = {i: instances[0] for i in range(len(jobs))}

    def lines(chosen: list, data: dict) -> dict:
        rows = counting.count(Sweep.assemble(chosen, benchmarks, data, RunDir(tmp_path / "never")))
        return {(x.model, x.stage): (x.calls, x.input_tokens, x.output_tokens) for x in summarize(rows, chosen)}

    alone = {**lines([same], {0: instances[0]}), **lines([longer], {0: instances[0]})}
    shared = lines(jobs, data)
    assert {k: v for k, v in shared.items() if k[0] != "fake"} == alone   # all counted in full (3 ≤ 16)
    monkeypatch.setattr(counting, "SAMPLE_INSTANCES", 1)
    sampled = lines(jobs, data)
    for key, (calls, tokens_in, tokens_out) in alone.items():
        if key[0] == "same-budget":
            assert sampled[key] == alone[key]   # shares the cell's full count
            continue
        assert sampled[key][0] == calls
        assert abs(sampled[key][1] - tokens_in) <= 0.15 * tokens_in, key
        assert abs(sampled[key][2] - tokens_out) <= 0.15 * tokens_out, key
    rows = counting.count(Sweep.assemble(jobs, benchmarks, data, RunDir(tmp_path / "never"))).to_pylist()
    measured = {r["model"]: (r["sampled"], r["calls"]) for r in rows if r["stage"] == "generate"}
    assert measured["longer"] == (3, 9) and measured["fake"] == measured["same-budget"] == (9, 9)


def test_simulated_plan_from_the_cli(tmp_path):
    """`--simulate` runs the job runner against simulated answers: the same table as the count."""
    args = ["-m", "benchmark=benchpres", "condition=all", "model=fake", "judge=fake", "limit=2",
            f"run.dir={tmp_path / 'never'}"]
    tables = {}
    for flag in ("", "--simulate"):
        done = cli("prefray.plan", *args, *([flag] if flag else []), "--csv", str(tmp_path / f"plan{flag}.csv"))
        assert done.returncode == 0, done.stderr
        with open(tmp_path / f"plan{flag}.csv") as handle:
            tables[flag] = list(csv.DictReader(handle))
        assert ("sample of" in done.stdout) == (flag == "")
    money = ("cost_usd", "max_cost_usd", "uncached_cost_usd", "cache_saved_usd")   # summed in another order
    assert [{k: v for k, v in r.items() if k not in money} for r in tables[""]] == [
        {k: v for k, v in r.items() if k not in money} for r in tables["--simulate"]]
    for counted, simulated in zip(tables[""], tables["--simulate"]):
        assert [float(counted[k]) for k in money] == pytest.approx([float(simulated[k]) for k in money])
    assert not (tmp_path / "never").exists()
