"""A benchmark's settings and its conditions' are typed by the benchmark (`settings_type`,
`condition_type`): every job's sections are built into them when a sweep is composed, and a bad key
stops `prefray launch` and `prefray plan` before Ray with one line naming the key path and where the
value came from (exit 2, nothing written)."""

from __future__ import annotations

import dataclasses

import pytest

from prefray.app import catalog
from prefray.app.compose import compose_sweep
from prefray.app.validate import check_dataclass
from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings
from tests.conftest import command_here

# (overrides, words the one line must contain): a value its rule refuses, an unknown key, a nested
# key, in a benchmark's settings and in a condition.
REFUSED = [
    (["benchmark=prisk_irp", "benchmark.retrieval.top_k=x"],
     ["benchmark.retrieval.top_k=x: allowed is an integer >= 1", "(benchmark=prisk_irp: set by an override)"]),
    (["benchmark=prisk_irp", "+benchmark.retrieval_k=3"],
     ["benchmark.retrieval_k=3: unknown key", "retrieval,", "(benchmark=prisk_irp: set by an override)"]),
    (["benchmark=prisk_sycophancy", "benchmark.verdict_judge=sometimes"],
     ["benchmark.verdict_judge=sometimes: allowed is true or false", "(benchmark=prisk_sycophancy"]),
    (["benchmark=cupid", "+benchmark.samples=3"],
     ["benchmark.samples=3: allowed is 1 (CUPID asks one answer per instance)", "(benchmark=cupid"]),
    (["benchmark=cupid", "+benchmark.params.rerank={temperature: 0}"],
     ["benchmark.params.rerank=...: unknown key; allowed keys here: decomposer, generation", "(benchmark=cupid"]),
    (["benchmark=benchpres", "benchmark.memory_layout=flat"],
     ["benchmark.memory_layout=flat: allowed is one of knowledge | tagged", "(benchmark=benchpres"]),
    (["benchmark=cupid", "condition=full", "condition.history=some"],
     ["condition.history=some: allowed is one of all | oracle | none",
      "(benchmark=cupid condition=full: set by an override)"]),
    (["benchmark=cupid", "condition=full", "condition.tasks=[inference,judging]"],
     ["condition.tasks=['inference', 'judging']: allowed is a non-empty list of inference | generation"]),
    (["benchmark=prisk_sycophancy", "condition=base", "+condition.memory=full"],
     ["condition.memory=full: unknown key; allowed keys here: name, profile, reflection, retrieval, routing_query",
      "(benchmark=prisk_sycophancy condition=base: set by an override)"]),
    (["benchmark=prisk_narrowing", "condition.conditions.base.routing_query=memory"],
     ["condition.conditions.base.routing_query=memory: allowed is one of query | profile_query, or null",
      "(benchmark=prisk_narrowing condition=factorial: set by an override)"]),
]
IDS = [" ".join(o) for o, _ in REFUSED]


@pytest.mark.parametrize("command", ["launch", "plan"])
@pytest.mark.parametrize("overrides,words", REFUSED, ids=IDS)
def test_a_bad_benchmark_or_condition_key_is_one_line_naming_its_path(tmp_path, command, overrides, words):
    run_dir = tmp_path / "run"
    done = command_here(command, "model=fake", "judge=fake", *overrides, f"run.dir={run_dir}", forbid_ray=True)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []          # no run dir, no manifest, no cache


def test_a_refused_value_is_traced_to_the_file_that_sets_it_or_to_an_override():
    """A value the option file writes (a plugin's typo, say) names that file; another value is an
    override; a required key left out is missing, not set in the file."""
    from prefray.app.validate import origin

    summary = catalog.find("cupid").condition_file("summary")
    names = {"benchmark": "cupid", "condition": "summary"}
    problem = "condition.summarize=true: allowed is REFUSED"      # the file writes summarize: true
    assert origin("condition", {"summarize": True}, names, problem) == f"{problem} (benchmark=cupid " \
                                                                        f"condition=summary: set in {summary})"
    assert origin("condition", {"summarize": "yes"}, names, "condition.summarize=yes: x").endswith(
        "(benchmark=cupid condition=summary: set by an override)")
    assert origin("condition", {}, names, "condition.turns: missing; x").endswith(f": not set in {summary})")


def test_a_required_condition_key_left_out_is_refused(tmp_path):
    """The example's condition key has no default (REQUIRED): without it the launch stops."""
    if "stated_preference" not in catalog.names():
        pytest.skip("the example benchmark is not installed: pip install --no-deps -e examples/stated_preference")
    done = command_here("launch", "model=fake", "judge=fake", "benchmark=stated_preference",
                        "~condition.state_preference", f"run.dir={tmp_path / 'run'}", forbid_ray=True)
    assert done.returncode == 2 and list(tmp_path.iterdir()) == []
    assert ("condition.state_preference: missing; a value is required (true or false) (benchmark=stated_preference "
            "condition=stated: not set in ") in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", catalog.names(builtin_only=True))
def test_each_builtin_benchmark_types_its_shipped_config_and_conditions(name):
    benchmark = catalog.load(name)
    assert issubclass(benchmark.settings_type, BenchmarkSettings) and benchmark.settings_type is not BenchmarkSettings
    assert issubclass(benchmark.condition_type, ConditionSettings)
    written = catalog.benchmark_config(name)
    problems: list[str] = []
    check_dataclass("benchmark", written, benchmark.settings_type, problems, required=True)
    assert problems == []
    settings = benchmark.settings_of(written)
    assert isinstance(settings, benchmark.settings_type)
    # every key the file writes reaches the benchmark as written (a number as a number, a section as
    # its dataclass, the same values)
    assert _plain(settings, written) == written
    for condition in catalog.conditions(name)[0]:
        cond_written = catalog.condition_config(name, condition)
        check_dataclass("condition", cond_written, benchmark.condition_type, problems, required=True)
        assert problems == [], condition
        typed = benchmark.condition_of(cond_written)
        assert isinstance(typed, benchmark.condition_type) and _plain(typed, cond_written) == cond_written


# The keys every benchmark's config names itself by: the engine's base keys, set per benchmark.
CATALOG_KEYS = {"name", "impl", "conditions", "default_condition", "paper_judge", "paper_models", "prompts"}


@pytest.mark.parametrize("name", catalog.names(builtin_only=True))
def test_each_default_is_stated_once_and_the_file_repeats_it(name):
    """A built-in benchmark's own keys have their defaults in its dataclass; its config file repeats
    them for the user to see, value for value (the benchmark's code has no default of its own)."""
    benchmark = catalog.load(name)
    written = benchmark.settings_of(catalog.benchmark_config(name))
    defaults = benchmark.settings_of({})
    keys = [f.name for f in dataclasses.fields(benchmark.settings_type) if f.name not in CATALOG_KEYS]
    assert {k: getattr(written, k) for k in keys} == {k: getattr(defaults, k) for k in keys}
    base = {f.name for f in dataclasses.fields(BenchmarkSettings)}
    own = [k for k in keys if k not in base]
    assert own and set(catalog.benchmark_config(name)) >= set(own)       # the file shows every one of them


def test_the_jobs_of_a_sweep_carry_the_benchmarks_types():
    configs, jobs, _ = compose_sweep(["model=fake", "judge=fake", "benchmark=prisk_narrowing",
                                      "benchmark.retrieval.top_k=5", "benchmark.samples=2"], multirun=False)
    (job,) = jobs
    assert type(job.settings).__name__ == "NarrowingSettings" and job.settings.retrieval.top_k == 5
    assert job.settings.samples == 2 and job.settings.generation["temperature"] == 0.8
    assert type(job.condition_settings).__name__ == "FactorialCondition"
    assert job.condition_settings.conditions["retrieval"].routing_query == "query"
    assert configs[0]["benchmark"]["retrieval"] == {"top_k": 5}     # the recorded config stays as composed


def _plain(value, like):
    """A typed value back as the shape the file wrote (only the keys `like` has)."""
    if dataclasses.is_dataclass(value):
        return {k: _plain(getattr(value, k), v) for k, v in like.items()} if isinstance(like, dict) else value
    if isinstance(value, dict) and isinstance(like, dict):
        return {k: _plain(value[k], like[k]) for k in like}
    return value
