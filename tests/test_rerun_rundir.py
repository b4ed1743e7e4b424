"""A rerun learns its run directory once: one RunDir is built at the command's edge and that object
is what the runner, the plan, the gateways, the ledger, the journal and the aggregation are given."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.rundir import RunDir


def test_the_handle_is_a_small_frozen_value_that_travels_with_its_absolute_path(tmp_path, monkeypatch):
    """What a Ray actor receives: the same run directory, named by its absolute path (an actor's
    working directory is not the driver's)."""
    monkeypatch.chdir(tmp_path)
    run = RunDir("runs/one")
    with pytest.raises(AttributeError):
        run.root = Path("elsewhere")  # type: ignore[misc]
    received = pickle.loads(pickle.dumps(run))
    assert received.root == tmp_path / "runs" / "one"
    assert received.ledger == tmp_path / "runs" / "one" / "ledger"
    assert received == RunDir(tmp_path / "runs" / "one") and hash(received) == hash(RunDir(received.root))
    assert run.root == Path("runs/one")   # the driver's own handle is left as the user named it


@pytest.mark.e2e
def test_a_rerun_walks_its_run_directory_with_the_one_handle_it_built(run_cli, make_fake_server, tmp_path,
                                                                     monkeypatch):
    """A run whose model calls were refused (401) is rerun against a server that answers. On the
    driver, the rerun builds exactly one RunDir for the run directory (in staged_run) and one for
    the scratch copy its estimate runs in; nothing below rebuilds the run directory from a path."""
    from tests.conftest import command_here

    wrong = make_fake_server("--reject", "fake-model=401")
    right = make_fake_server()
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *wrong.model_overrides(), f"run.dir={run_dir}", "limit=2",
            "benchmark.samples=1", "run.cache=false", expect_code=3)

    built: list[Path] = []
    plain_init = RunDir.__init__

    def counted_init(self: RunDir, root) -> None:
        plain_init(self, root)
        built.append(self.root)

    monkeypatch.setattr(RunDir, "__init__", counted_init)
    done = command_here("rerun", str(run_dir), f"model.base_url={right.openai_url}",
                        f"judge.base_url={right.openai_url}", "run.cache=false")
    monkeypatch.undo()

    assert done.returncode == 0, done.stderr
    # the walk went all the way: calls through the gateways, rows stored, the paid ledger and the
    # metrics written (2 generations, each judged by BenchPreS's 5 judge units: 12 units, as in
    # test_reliability_failfast's rerun)
    assert right.stats()["by_model"]["fake-model"] == 2
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    best: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: r["attempt"]):
        best[row["unit_id"]] = row
    assert len(best) == 2 + 2 * 5 and all(r["status"] == "ok" for r in best.values())
    assert any((run_dir / "ledger").iterdir()) and (run_dir / "metrics.csv").exists()

    ours = [root for root in built if root.resolve() == run_dir.resolve()]
    assert len(ours) == 1, built
    others = [root for root in built if root.resolve() != run_dir.resolve()]
    assert len(others) == 1 and others[0].name.startswith("prefray-estimate-"), built   # the dry run's scratch
