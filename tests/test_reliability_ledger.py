"""costs.csv counts what the provider saw: every try sent, with its usage, stored row or not."""

from __future__ import annotations

import csv
import os
import signal
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.test_reliability_runs import start_launch, wait_for

pytestmark = pytest.mark.e2e

PRICES = {"fake-model": (1.0, 2.0), "fake-judge": (1.0, 2.0)}  # USD per Mtok in/out (conf/model/fake.yaml)


def costs(run_dir: Path) -> dict[str, float]:
    with open(run_dir / "costs.csv") as handle:
        lines = list(csv.DictReader(handle))
    return {k: sum(float(r[k]) for r in lines)
            for k in ("calls", "cached", "unsettled", "input_tokens", "output_tokens", "cost_usd")}


# USD per Mtok read from / written to the prompt cache (conf/model/fake.yaml, fake-anthropic.yaml)
CACHE_PRICES = {"fake-model": (0.25, 1.0), "fake-judge": (0.25, 1.0), "fake-claude": (0.3, 3.75)}


def server_dollars(stats: dict, prices: dict | None = None) -> float:
    """What the fake provider billed, from its own counts: input at the input price except the
    tokens it read from or wrote to its prompt cache, at their prices."""
    prices = prices or PRICES
    spent = 0.0
    for m, tokens_in in stats["input_tokens_by_model"].items():
        read = stats.get("cache_read_tokens_by_model", {}).get(m, 0)
        written = stats.get("cache_write_tokens_by_model", {}).get(m, 0)
        price_read, price_write = CACHE_PRICES.get(m, (prices[m][0], prices[m][0]))
        spent += ((tokens_in - read - written) * prices[m][0] + read * price_read + written * price_write
                  + stats["output_tokens_by_model"][m] * prices[m][1]) / 1e6
    return spent


def assert_ledger_matches(run_dir: Path, stats: dict) -> None:
    paid = costs(run_dir)
    assert paid["calls"] == stats["requests"] and paid["unsettled"] == 0
    assert paid["input_tokens"] == stats["input_tokens"] and paid["output_tokens"] == stats["output_tokens"]
    assert abs(paid["cost_usd"] - server_dollars(stats)) < 1e-9


def test_ledger_counts_retried_faults(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--fault-rate", "0.3", "--sticky-fault-rate", "0.05", "--faults", "429,500,malformed")
    run_dir = tmp_path / "run"
    done = run_cli("model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=2",
                   "benchmark.samples=2", "run.cache=false", "model.max_wait_s=0.2", "judge.max_wait_s=0.2",
                   expect_ok=False)
    assert done.returncode in (0, 3), done.stderr
    stats = server.stats()
    assert stats["faults"] > 0
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    assert stats["requests"] > len(rows)            # retries: more requests than rows
    assert_ledger_matches(run_dir, stats)


def test_ledger_counts_answers_lost_to_a_killed_driver(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--latency", "0.2")
    run_dir = tmp_path / "run"
    args = ["model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=3",
            "benchmark.samples=2", "run.cache=false", "run.shard_size=3"]
    process = start_launch(*args)
    try:
        wait_for(lambda: server.stats()["requests"] >= 4 or process.poll() is not None)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    time.sleep(2.0)                                    # the gateway stops sending with its driver
    settled = server.stats()["requests"]
    time.sleep(1.0)
    assert server.stats()["requests"] == settled       # nothing is sent any more
    run_cli(*args)                                     # the resume, in this process
    stats = server.stats()
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    assert stats["requests"] > len(rows)              # some answers were paid but never stored
    paid = costs(run_dir)
    assert paid["calls"] == stats["requests"]          # every request the server saw, counted once
    # the killed gateway never saw the usage of the answers it was waiting for: counted as unsettled
    assert paid["unsettled"] > 0
    assert paid["input_tokens"] < stats["input_tokens"] and paid["output_tokens"] < stats["output_tokens"]
