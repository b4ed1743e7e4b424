"""One typed config: every default stated once, the same typed objects down to the runner, one list
of failure causes that the failure policy, rerun and the docs read."""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path

import pyarrow as pa
import pytest
from omegaconf import OmegaConf

from prefray.app.compose import compose_overrides, conf_dir
from prefray.app.table import cause_table
from prefray.app.validate import config_problems
from prefray.engine.benchmark import Job
from prefray.engine.config import RunConfig
from prefray.engine.config.schema import (
    REQUIRED,
    SECTIONS,
    BatchConfig,
    BenchmarkSettings,
    ConditionSettings,
    ModelSpec,
    TopConfig,
    build,
    default_of,
)
from prefray.engine.rundir.layout import RunDir
from prefray.engine.types import CAUSE_MEANINGS, CallResult, Cause

CONF = conf_dir()
ROOT = Path(__file__).resolve().parents[1]
# The strings stored in the `cause` column of every run so far: renaming one would orphan old rows.
STORED_CAUSES = {"rate_limit", "timeout", "server_error", "connection", "bad_response", "client_error", "auth",
                 "model_not_found", "budget", "parse_error", "context_overflow"}


def test_config_yaml_states_the_schema_defaults():
    """conf/config.yaml shows the user every run default; each equals the schema's own."""
    data = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"))
    assert data["limit"] == TopConfig().limit
    assert data["run"] == {f.name: default_of(f) for f in dataclasses.fields(RunConfig)}
    assert data["run"]["batch"] == dataclasses.asdict(BatchConfig())


def test_the_model_of_the_schema_is_the_model_the_engine_runs_with():
    from prefray.engine import types

    assert types.ModelSpec is ModelSpec and SECTIONS["model"] is ModelSpec and SECTIONS["judge"] is ModelSpec
    required = [f.name for f in dataclasses.fields(ModelSpec) if default_of(f) is REQUIRED]
    assert required == ["name", "provider", "model_id"]
    for f in dataclasses.fields(ModelSpec):
        assert f.metadata["doc"] and f.metadata["rule"], f.name


def test_model_spec_from_config_names_unknown_and_missing_fields():
    with pytest.raises(ValueError, match=r"model 'm': unknown field\(s\) \['bogus'\]"):
        ModelSpec.from_config({"name": "m", "provider": "openai", "model_id": "x", "bogus": 1})
    with pytest.raises(ValueError, match=r"model 'm': missing field\(s\) \['model_id'\]"):
        ModelSpec.from_config({"name": "m", "provider": "openai"})
    spec = ModelSpec.from_config({"name": "m", "provider": "openai", "model_id": "x", "rpm": 60})
    assert spec.rpm == 60 and isinstance(spec.rpm, int)   # a model's values are kept as given


def test_run_config_is_built_from_a_composed_config():
    cfg = compose_overrides([["model=fake", "run.budget_usd=5", "run.plots=false", "run.batch.poll_s=1"]], CONF)[0]
    assert config_problems(cfg, CONF) == []
    run = RunConfig.from_config(cfg["run"])
    assert run.plots is False and run.budget_usd == 5.0 and isinstance(run.budget_usd, float)
    assert run.batch == BatchConfig(poll_s=1.0) and run.compact_every == RunConfig().compact_every
    # a rerun records `run.batch.poll_s=...` as a dotted key on the stored run config
    assert build(RunConfig, {"batch.poll_s": 2}).batch.poll_s == 2.0
    with pytest.raises(ValueError, match="unknown"):
        build(RunConfig, {"plot": True})


@pytest.mark.parametrize("value", ["2", "yes", "null"])
def test_run_plots_takes_only_a_boolean(value):
    cfg = compose_overrides([["model=fake", f"run.plots={value}"]], CONF)[0]
    assert config_problems(cfg, CONF) == [f"run.plots={cfg['run']['plots'] if value != 'null' else 'null'}: "
                                          "allowed is true or false"]


def test_the_sweep_carries_the_typed_run_config_and_its_send_policy(tmp_path):
    from prefray.engine.calls.batch.tier import BatchSettings
    from prefray.engine.flow.runner import JobRunner, Outlets
    from prefray.engine.sweep import PreparedJob, SendPolicy, Sweep

    run = RunConfig.from_config({"compact_every": 7, "shard_size": 3, "cache_dir": str(tmp_path), "plots": False})
    job = Job("b", "c", ModelSpec(name="m", provider="openai", model_id="m"), {}, BenchmarkSettings("b"),
              ConditionSettings("c"))
    sweep = Sweep((PreparedJob(job, None, []),), run, RunDir(tmp_path), SendPolicy(frozenset({Cause.TIMEOUT})),
                  location="s3://b/p")
    assert sweep.run is run and sweep.where == "s3://b/p"
    assert sweep.cache_file == tmp_path / "responses.sqlite"
    runner = JobRunner(sweep.jobs[0], sweep, Outlets.of(sweep.run_dir), None)
    assert (runner.config.shard_size, runner.config.compact, runner.config.compact_every) == (3, True, 7)
    assert "timeout" in runner.policy.resend_causes and not runner.policy.subject_stored_only
    assert runner.folder == tmp_path / "shards" / "benchmark=b" / "model=m" / "condition=c"
    local = Sweep((), RunConfig(), RunDir(tmp_path))
    assert local.where == str(tmp_path) and local.cache_file == tmp_path.parent / ".prefray-cache" / "responses.sqlite"
    assert BatchSettings() == BatchSettings(**dataclasses.asdict(BatchConfig()))


def test_causes_are_one_list_with_the_stored_values():
    from prefray.engine.failures import JUDGE_FAILURE_CAUSES, MODEL_FAILURE_CAUSES, NO_ANSWER_CAUSES

    assert {str(c) for c in Cause} == STORED_CAUSES
    assert set(CAUSE_MEANINGS) == set(Cause)
    assert NO_ANSWER_CAUSES | MODEL_FAILURE_CAUSES == set(Cause) and not NO_ANSWER_CAUSES & MODEL_FAILURE_CAUSES
    assert JUDGE_FAILURE_CAUSES <= MODEL_FAILURE_CAUSES
    # a row stores the cause's plain string, whatever produced it
    row = CallResult(status="failed", cause=Cause.PARSE_ERROR)
    stored = pa.table({"cause": [row.cause, "timeout"]})
    assert stored["cause"].type == pa.string() and stored["cause"].to_pylist() == ["parse_error", "timeout"]


def test_rerun_reads_the_causes_from_the_one_list():
    from prefray.app import rerun
    from prefray.app.sweep import SweepError
    from prefray.engine.failures import NO_ANSWER_CAUSES

    assert rerun.RERUN_CAUSES == set(Cause) and rerun.DEFAULT_RERUN_CAUSES == NO_ANSWER_CAUSES
    shown = rerun.causes_help()
    for cause in Cause:
        assert f"  {cause}{'*' if cause in NO_ANSWER_CAUSES else ''}: {CAUSE_MEANINGS[cause]}" in shown
    # the docstring's usage line shows two causes; a hand-kept list of them all would fall out of step
    named = set(re.findall(r"[a-z_]+", rerun.__doc__ or "")) & {str(c) for c in Cause}
    assert named <= {"rate_limit", "timeout", "budget"}, f"the docstring lists causes by hand: {named}"
    with pytest.raises(SweepError, match="choose among \\['auth', 'bad_response'"):
        rerun.split_causes(["causes=rate_limit,nonsense"])
    causes, rest = rerun.split_causes(["causes=parse_error", "run.seed=1"])
    assert causes == {"parse_error"} and rest == ["run.seed=1"]


def test_docs_cause_table_is_generated_from_the_causes():
    # The docs site's config reference is made from the causes when the site is built (docs/hooks.py).
    page = runpy.run_path(str(ROOT / "docs" / "hooks.py"))["reference_page"]()
    assert cause_table() in page.replace("&lt;", "<")
    for cause in Cause:
        assert f"| `{cause}` |" in cause_table()


@pytest.mark.e2e
def test_run_plots_false_writes_the_metrics_without_figures(run_cli, fake_server, tmp_path):
    shown, hidden = tmp_path / "shown", tmp_path / "hidden"
    common = ("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=1",
              "benchmark.samples=1", "run.cache=false", "run.progress=false", *fake_server.model_overrides())
    run_cli(*common, f"run.dir={hidden}", "run.plots=false")
    run_cli(*common, f"run.dir={shown}", plots=True)
    assert (hidden / "metrics.csv").read_bytes() == (shown / "metrics.csv").read_bytes()
    assert not (hidden / "plots").exists()
    assert list((shown / "plots").glob("*.png"))


def test_each_distinct_dataset_is_loaded_once_by_its_typed_settings():
    """Jobs that differ only in the evaluated model share one load; another condition is another
    dataset, and so is another limit. Settings hold lists (not hashable): the key is their JSON."""
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets

    _, jobs, benchmarks = compose_sweep(["benchmark=cupid", "model=fake,gpt-4o", "judge=fake",
                                         "condition=full,oracle", "limit=2"], multirun=True)
    instances, errors = load_datasets(jobs, benchmarks)
    assert not errors and len(jobs) == 4 and isinstance(jobs[0].settings.conditions, list)
    loads_by_condition: dict[str, set[int]] = {}
    for index, job in enumerate(jobs):
        loads_by_condition.setdefault(job.condition, set()).add(id(instances[index]))
    assert sorted(len(loads) for loads in loads_by_condition.values()) == [1, 1]
    assert loads_by_condition["full"] != loads_by_condition["oracle"]
    one_more = dataclasses.replace(jobs[0], limit=3)
    assert one_more.dataset_key() != jobs[0].dataset_key()
    assert len(load_datasets([one_more], benchmarks)[0][0]) == 3 and len(instances[0]) == 2
