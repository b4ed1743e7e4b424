"""The installed benchmarks (app/catalog.py): found by entry point, conditions namespaced
per benchmark, unknown names refused with the list of what is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefray.app import catalog
from prefray.app.compose import compose_configs, conf_dir
from prefray.app.sweep import SweepError, expand

CONF = conf_dir()


def test_prefray_registers_its_own_benchmarks_like_any_plugin():
    suite = catalog.names(builtin_only=True)
    assert {"benchpres", "cupid", "prisk_irp", "prisk_narrowing", "prisk_sycophancy"} <= set(suite)
    for name in suite:
        found = catalog.find(name)
        assert found.config_file.is_file() and found.impl.startswith("prefray.benchmarks.")
        assert catalog.load(name).name == name
        assert all(found.condition_file(c).is_file() for c in catalog.conditions(name)[0])
    assert [c.benchmark for c in expand(["benchmark=all"], CONF, multirun=True)] == suite


def test_an_unknown_benchmark_is_one_line_naming_what_is_installed():
    with pytest.raises(SweepError) as caught:
        expand(["benchmark=nope"], CONF, multirun=False)
    assert str(caught.value) == f"unknown benchmark 'nope'; installed: {', '.join(catalog.names())}"


@pytest.fixture
def twin(tmp_path, monkeypatch):
    """A second installed benchmark with a condition named like BenchPreS's `default`."""
    (tmp_path / "conditions").mkdir()
    (tmp_path / "twin.yaml").write_text("conditions: [default]\nsamples: 1\n")
    (tmp_path / "conditions" / "default.yaml").write_text("colour: blue\n")
    everything = {**catalog.installed(), "twin": catalog.Installed("twin", "twin:BENCHMARK", Path(tmp_path), False)}
    monkeypatch.setattr(catalog, "installed", lambda: everything)
    return "twin"


def test_two_benchmarks_each_have_their_own_condition_of_one_name(twin):
    jobs = expand(["condition=default", "model=fake", "judge=fake"], CONF, multirun=True)
    assert sorted(j.benchmark for j in jobs) == ["benchpres", twin]
    configs = {c["benchmark"]["name"]: c for c in compose_configs(jobs, CONF)}
    assert configs[twin]["condition"] == {"name": "default", "colour": "blue"}
    assert configs["benchpres"]["condition"]["name"] == "default" and "memory" in configs["benchpres"]["condition"]
    # benchmark=all is the built-in suite: a plugin runs by name or with glob(*)
    assert twin not in {j.benchmark for j in expand(["benchmark=all", "condition=all"], CONF, multirun=True)}
    assert twin in {j.benchmark for j in expand(["benchmark=glob(*)", "condition=all"], CONF, multirun=True)}


def test_composing_registers_the_benchmarks_its_override_lists_name():
    """Hydra is given the benchmarks composed (each list's `benchmark=NAME`, else config.yaml's
    default: benchpres), or every installed one when a list chooses it another way."""
    from prefray.app.compose import benchmarks_named

    assert benchmarks_named([["benchmark=cupid", "model=fake"], ["model=fake", "benchmark.limit=3"]],
                            CONF) == {"cupid", "benchpres"}
    assert benchmarks_named([["benchmark=prisk_irp"], ["benchmark=prisk_irp", "judge=fake"]], CONF) == {"prisk_irp"}
    assert benchmarks_named([["+benchmark=cupid"]], CONF) is None
    assert benchmarks_named([["benchmark=cupid,benchpres"]], CONF) is None
    assert benchmarks_named([["~benchmark"]], CONF) is None
