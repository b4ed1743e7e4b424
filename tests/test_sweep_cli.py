"""Sweep expansion and fail-fast checks, through the planner and the real CLI."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from prefray.app.compose import conf_dir
from prefray.app.sweep import SweepError, all_options, expand, group_options, paper_judge
from prefray.app.sweep import benchmark_conditions as conditions
from tests.conftest import launch, refused_here

CONF = conf_dir()
KEYED_ENVS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY")
DOUBLES = {"fake", "fake-anthropic", "local"}
# The judge each paper used (BenchPreS §4.1, CUPID App. A, PRISK judge model); the suite's list of
# benchmarks is read from what is installed (benchmark=all), never written here.
PAPERS_SAY = {"benchpres": "deepseek-r1", "cupid": "gpt-4o", "prisk_irp": "gpt-5.1", "prisk_narrowing": "gpt-5.1",
              "prisk_sycophancy": "gpt-5.1"}
PAPER_JUDGES = {b: paper_judge(CONF, b) for b in all_options(CONF, "benchmark")}


def benchmark_conditions() -> dict[str, list[str]]:
    """The suite's benchmarks (benchmark=all) and the conditions each defines."""
    return {b: conditions(CONF, b)[0] for b in all_options(CONF, "benchmark")}


def test_the_paper_judges_are_the_papers():
    assert {b: PAPER_JUDGES.get(b) for b in PAPERS_SAY} == PAPERS_SAY


def evaluated_models() -> list[str]:
    """Model options prefray does not serve itself and that are not kept for a paper's lineup only
    (read here straight from the YAML files)."""
    files = {m: OmegaConf.load(CONF / "model" / f"{m}.yaml") for m in group_options(CONF, "model")}
    return [m for m, f in files.items() if f.get("serve") is None and f.get("in_all") is not False]


def test_all_is_every_benchmark_condition_and_evaluated_model_with_its_paper_judge():
    jobs = expand(["model=all", "condition=all"], CONF, multirun=True)
    models = evaluated_models()
    assert DOUBLES.isdisjoint(models) and {"gpt-5.2", "gpt-5.2-reasoning", "claude-sonnet-4.5"} <= set(models)
    lineup_only = {"o3-mini-2025-01-31", "qwen3-8b-sglang", "k-exaone-236b-a23b-reasoning"}
    assert lineup_only.isdisjoint(models) and lineup_only <= set(group_options(CONF, "model"))
    expected = {(b, m, c) for b, conds in benchmark_conditions().items() for c in conds for m in models}
    assert {(j.benchmark, j.model, j.condition) for j in jobs} == expected
    assert len(jobs) == len(expected)
    assert {(j.benchmark, j.judge) for j in jobs} == set(PAPER_JUDGES.items())


def test_prefray_served_models_keep_their_own_judge_and_stay_selectable():
    jobs = expand(["model=local,fake,fake-anthropic,gpt-4o", "benchmark=cupid"], CONF, multirun=True)
    assert {j.model: j.judge for j in jobs} == {"local": "local", "fake": "fake", "fake-anthropic": "fake-anthropic",
                                                "gpt-4o": "gpt-4o"}
    assert {j.judge for j in expand(["model=fake,gpt-5.2", "judge=local"], CONF, multirun=True)} == {"local"}
    judges = expand(["model=fake", "judge=all"], CONF, multirun=True)
    assert {j.judge for j in judges} == set(PAPER_JUDGES.values())
    assert [(j.benchmark, j.model, j.judge)
            for j in expand([], CONF, multirun=False)] == [("benchpres", "local", "local")]


def test_a_condition_alone_selects_the_benchmarks_that_define_it():
    jobs = expand(["condition=base"], CONF, multirun=True)
    assert sorted(j.benchmark for j in jobs) == sorted(b for b, c in benchmark_conditions().items() if "base" in c)
    with pytest.raises(SweepError, match="add -m"):
        expand(["condition=base"], CONF, multirun=False)


def test_narrowing_and_default_condition():
    jobs = expand(["model=local,fake", "benchmark=benchpres", "condition=default"], CONF, multirun=True)
    assert sorted((j.model, j.condition, j.judge) for j in jobs) == [("fake", "default", "fake"),
                                                                     ("local", "default", "local")]
    only = expand(["benchmark=benchpres"], CONF, multirun=False)
    assert [(j.benchmark, j.condition) for j in only] == [("benchpres", "default")]
    globbed = expand(["model=glob(fake*)"], CONF, multirun=True)
    assert sorted(j.model for j in globbed) == ["fake", "fake-anthropic"]


@pytest.mark.parametrize("overrides, message", [
    (["model=gpt-9"], "unknown model option"),
    (["benchmark=benchpres", "condition=no_such"], "unknown condition option"),
    (["model=fake,local"], "add -m"),
])
def test_bad_overrides_are_named(overrides, message):
    multirun = "add -m" not in message
    with pytest.raises(SweepError, match=message):
        expand(overrides, CONF, multirun=multirun)


def test_condition_of_another_benchmark_is_refused():
    conditions = benchmark_conditions()
    others = [(b, c) for b, conds in conditions.items() for c in conds if b != "benchpres"]
    if not others:
        pytest.skip("only one benchmark defines conditions")
    with pytest.raises(SweepError, match="do not exist for benchmark"):
        expand(["benchmark=benchpres", f"condition={others[0][1]}"], CONF, multirun=False)


def test_missing_keys_are_all_listed_and_nothing_is_written(tmp_path):
    run_dir = tmp_path / "never"
    env = {name: "" for name in KEYED_ENVS}
    # model=all on the default benchmark needs every provider's key (the judge's is OpenRouter's too)
    done = refused_here("-m", "model=all", f"run.dir={run_dir}", "limit=1", env=env)
    assert done.returncode == 2, done.stderr
    for name in KEYED_ENVS:
        assert name in done.stderr
    assert "nothing was run" in done.stderr
    assert not run_dir.exists()


def test_unreadable_dataset_fails_before_any_call(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "name": "A"}\n')
    done = refused_here("model=fake", "judge=fake", "benchmark.data.source=hub", f"benchmark.data.path={bad}",
                        f"run.dir={tmp_path / 'never'}")
    assert done.returncode == 2
    assert "bad.jsonl: row 1: field" in done.stderr
    assert not (tmp_path / "never").exists()


@pytest.mark.e2e
def test_unknown_option_exits_2_with_one_line(tmp_path):
    """As its own process: `python -m prefray.launch` exits 2, printing one line."""
    done = launch("model=gpt-9", f"run.dir={tmp_path / 'never'}", timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "gpt-9" in done.stderr


@pytest.mark.e2e
def test_resuming_with_other_settings_is_refused(run_cli, fake_server, tmp_path):
    run_dir = tmp_path / "run"
    base = ["model=fake", "judge=fake", *fake_server.model_overrides(), f"run.dir={run_dir}", "benchmark.samples=1"]
    run_cli(*base, "limit=1")
    sent = fake_server.stats()["requests"]
    done = run_cli(*base, "limit=1", "run.seed=7", "judge.params.max_tokens=99", expect_code=2)
    assert "other settings" in done.stderr and "seed" in done.stderr and "judge.params.max_tokens" in done.stderr
    assert fake_server.stats()["requests"] == sent
    run_cli(*base, "limit=2", "benchmark.samples=2", "run.shard_size=3")  # more data or samples: a resume
    assert fake_server.stats()["requests"] > sent
