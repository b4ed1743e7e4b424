"""A resume that asks for less than the run dir holds (a smaller limit, fewer samples) reports its
metrics over what it asked for, sends nothing, and says how many stored rows it left out."""

from __future__ import annotations

from pathlib import Path

import pytest


def _metrics(run_dir: Path) -> list[tuple]:
    import csv

    with open(run_dir / "metrics.csv") as handle:
        return sorted((r["model"], r["condition"], r["judge"], r["metric"], r["value"], r["n"], r["excluded"])
                      for r in csv.DictReader(handle))


def _stored_units(run_dir: Path) -> int:
    import pyarrow.dataset as ds

    return len(set(ds.dataset(run_dir / "shards", format="parquet").to_table(columns=["unit_id"])["unit_id"]
                   .to_pylist()))


@pytest.mark.e2e
@pytest.mark.parametrize("less", [["limit=1"], ["benchmark.samples=2"]], ids=["smaller-limit", "fewer-samples"])
def test_a_resume_asking_for_less_reports_metrics_over_what_it_asked(run_cli, fake_server, tmp_path, less):
    """A run of limit=2 (3 samples), resumed into the same run.dir with less: its metrics equal a fresh
    run of the smaller plan, nothing is sent, and one line counts the stored rows left out."""
    base = ["model=fake", "judge=fake", "benchmark=benchpres", *fake_server.model_overrides(), "run.cache=false"]
    resumed, fresh = tmp_path / "resumed", tmp_path / "fresh"
    run_cli(*base, "limit=2", f"run.dir={resumed}")
    stored = _stored_units(resumed)
    sent = fake_server.stats()["requests"]

    done = run_cli(*base, "limit=2", *less, f"run.dir={resumed}")
    assert fake_server.stats()["requests"] == sent                      # everything asked was stored
    run_cli(*base, "limit=2", *less, f"run.dir={fresh}")

    assert _metrics(resumed) == _metrics(fresh)
    assert _metrics(resumed) != []
    left_out = stored - _stored_units(fresh)                            # the units the smaller plan has not
    assert left_out > 0
    assert (f"prefray: metrics over what this launch asked for: {left_out} stored row(s) of other instances or "
            "samples") in done.stdout, done.stdout
    assert _stored_units(resumed) == stored                             # left out of the metrics, still stored
    assert done.stdout.strip().splitlines()[-1].startswith("prefray: found: ")
