"""Every config option composes; a model option states only what differs from the schema's defaults."""

from __future__ import annotations

import dataclasses
import re
import runpy
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from prefray.app.compose import build_job, compose_configs, compose_overrides, conf_dir
from prefray.app.sweep import all_options, expand, group_options
from prefray.engine.config.schema import REQUIRED, default_of
from prefray.engine.types import ModelSpec

CONF = conf_dir()


OPTION_FILES = sorted([*(CONF / "model").glob("*.yaml"), *(CONF / "scorer").glob("*.yaml")])


@pytest.mark.parametrize("path", OPTION_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_model_option_lists_only_what_differs_from_the_defaults(path):
    """A model (or scorer) file states a key only when its value is not the schema's default, so a
    new key with a default edits no model file."""
    data = OmegaConf.to_container(OmegaConf.load(path))
    fields = {f.name: f for f in dataclasses.fields(ModelSpec)}
    assert set(data) <= set(fields), f"{path.name}: unknown {set(data) - set(fields)}"
    restated = [k for k, v in data.items() if default_of(fields[k]) is not REQUIRED
                and v == default_of(fields[k]) and type(v) is type(default_of(fields[k]))]
    assert restated == [], f"{path.name} restates the default of {restated}"
    # seed_offset is set by `judge.repeats=K` on a judge's copies (prefray/app/panel.py), never in a file
    assert "seed_offset" not in data
    spec = ModelSpec.from_config(data)
    assert spec.name == path.stem and spec.provider in ("openai", "anthropic")
    assert spec.api_key_env or spec.serve, "a remote model needs api_key_env"


def test_composing_fills_every_key_a_model_file_leaves_out():
    cfg = compose_overrides([["model=gpt-4o", "judge=fake", "model.rpm=60", "judge.tier=batch"]], CONF)[0]
    in_files = {f.name for f in dataclasses.fields(ModelSpec)} - {"seed_offset"}
    for group in ("model", "judge"):
        assert set(cfg[group]) == in_files, group
    on_file = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "gpt-4o.yaml"))
    assert "max_attempts" not in on_file and cfg["model"]["max_attempts"] == 4   # the schema's default
    assert cfg["model"]["rpm"] == 60 and on_file["rpm"] == 500                    # a stated key, overridden
    assert "tier" not in OmegaConf.to_container(OmegaConf.load(CONF / "judge" / "fake.yaml"))
    assert cfg["judge"]["tier"] == "batch" and cfg["judge"]["model_id"] == "fake-judge"


def test_the_config_reference_shows_every_model_key_with_its_default():
    page = runpy.run_path(str(Path(__file__).resolve().parents[1] / "docs" / "hooks.py"))["reference_page"](CONF)
    # | `{model,judge}.KEY` | allowed | default | meaning |  (a `|` inside a cell is escaped: `\|`)
    rows = dict(re.findall(r"^\| `\{model,judge\}\.(\w+)` \| .*? \| (.*?) \| .* \|$", page, re.MULTILINE))
    for f in dataclasses.fields(ModelSpec):
        default = default_of(f)
        shown = rows[f.name]
        if default is REQUIRED:
            assert shown == "required", f.name
        else:
            assert yaml.safe_load(shown) == default, (f.name, shown)


def test_every_option_composes_into_a_job():
    """Each benchmark × condition pair, each model and each judge, composed once (the full product
    is only expanded, in test_sweep_cli: composing thousands of jobs would add minutes)."""
    pairs = expand(["model=fake", "benchmark=glob(*)", "condition=all", "judge=fake"], CONF, multirun=True)
    # glob(*) is every option (every installed benchmark); `all` leaves out the models prefray serves
    # itself (test_sweep_cli)
    models = expand(["model=glob(*)", "judge=fake"], CONF, multirun=True)
    judges = expand(["model=fake", "judge=glob(*)"], CONF, multirun=True)
    configs = compose_configs(pairs + models + judges, CONF)
    jobs = [build_job(cfg, CONF) for cfg in configs]
    assert {j.model.name for j in jobs} == set(group_options(CONF, "model"))
    assert {j.roles["judge"].name for j in jobs} == set(group_options(CONF, "judge"))
    assert {j.benchmark for j in jobs} == set(group_options(CONF, "benchmark"))
    for cfg in configs:
        assert cfg["condition"]["name"] in cfg["benchmark"]["conditions"]
        assert cfg["benchmark"]["impl"]


# the built-in suite (a plugin may name no paper judge); not `benchmark`: pytest-benchmark's fixture
@pytest.mark.parametrize("name", all_options(CONF, "benchmark"))
def test_benchmark_names_an_evaluated_paper_judge(name):
    from prefray.app.sweep import all_options, paper_judge

    assert paper_judge(CONF, name) in all_options(CONF, "judge")
