"""The budget holds when the provider counts far more input tokens than estimated."""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pytest
import ray

from prefray.engine.calls.pricing import Calibration
from prefray.engine.money.budget import Budget, budget_warning
from tests.test_reliability_ledger import costs, server_dollars

pytestmark = pytest.mark.e2e


def test_calibration_ratio_and_overrun_closes_the_budget(ray_address):
    calibration = Calibration()
    assert calibration.ratio == 1.0
    calibration.add(100, 2000)
    calibration.add(300, 6000)
    assert calibration.ratio == 20.0
    ray.init(address=ray_address, namespace="prefray-test-budget", ignore_reinit_error=True)
    try:
        budget = Budget.remote(1.0)
        assert ray.get(budget.reserve.remote(0.1))
        ray.get(budget.settle.remote(0.1, 0.3, True))        # calibrating: counted, not closing
        assert ray.get(budget.reserve.remote(0.1))
        ray.get(budget.settle.remote(0.1, 0.2))              # above its reservation: closes at once
        state = ray.get(budget.state.remote())
        assert state["closed"] and state["overruns"] == 1 and abs(state["spent_usd"] - 0.5) < 1e-12
        assert not ray.get(budget.reserve.remote(0.001))
        assert "cost more than reserved" in budget_warning(state)
    finally:
        ray.shutdown()


def test_budget_holds_under_20x_input_inflation(run_cli, make_fake_server, tmp_path):
    budget = 0.05
    server = make_fake_server("--inflate-input", "20")
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=8",
            "benchmark.samples=3", "run.cache=false", f"run.budget_usd={budget}", "run.shard_size=4",
            expect_code=3)
    stats = server.stats()
    assert 0 < server_dollars(stats) <= budget                         # what the provider billed
    assert abs(costs(run_dir)["cost_usd"] - server_dollars(stats)) < 1e-9
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    statuses = Counter((r["status"], r["cause"]) for r in rows)
    assert statuses[("ok", "")] > 0 and statuses[("skipped", "budget")] > 0
    assert set(statuses) <= {("ok", ""), ("skipped", "budget")}
