"""CUPID end to end under the failure policy: a prompt over the model's context is the evaluated
model's failure, scored 0 as the reference scores it, never dropped."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from prefray.benchmarks.cupid.tests.test_cupid import shard_rows

pytestmark = pytest.mark.e2e

# The sample's full-condition inference and generation prompts are ≈2,000-2,300 fake tokens; the
# scorers' prompts are below 1,800. A 1,900-token context refuses exactly the evaluated model's calls.
CONTEXT = "1900"


def read_metrics(run_dir: Path, judge: str) -> dict[tuple[str, str], tuple[float, int, int]]:
    with open(run_dir / "metrics.csv") as handle:
        return {(r["condition"], r["metric"]): (float(r["value"]), int(r["n"]), int(r["excluded"]))
                for r in csv.DictReader(handle) if r["model"] == "fake" and r["judge"] == judge}


def test_an_inference_and_a_generation_over_the_context_score_zero(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--context-tokens", CONTEXT)
    run_dir, limit = tmp_path / "run", 2
    done = run_cli("benchmark=cupid", "condition=full", "model=fake", "judge=fake", *server.model_overrides(),
                   f"run.dir={run_dir}", f"limit={limit}", "run.progress=false", expect_ok=False)
    assert done.returncode != 2, done.stderr
    rows = shard_rows(run_dir)
    assert {(r["stage"], r["cause"]) for r in rows} == {("infer", "context_overflow"), ("generate", "context_overflow")}
    # no scorer was called, so no sweep judge is named on any row: the cell is reported under judge ""
    got = read_metrics(run_dir, "")
    # each inference counts as an empty inferred checklist: 0 of 0 inferred items, 0 of t true items
    for name in ("precision", "recall", "F1"):
        assert got[("full", name)] == (0.0, limit, 0)
    assert got[("full", "failures_model[task=inference]")] == (float(limit), limit, 0)
    assert got[("full", "alignment")] == (0.0, limit, 0)
    assert got[("full", "failures_model[task=generation]")] == (float(limit), limit, 0)
    assert got[("full", "no_answer[task=inference]")][0] == 0.0
