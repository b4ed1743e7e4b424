"""Budget, cache, reruns, re-judging and estimates — counted in requests and dollars at the server."""

from __future__ import annotations

import csv
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import command_here

PRICES = {"fake-model": (1.0, 2.0), "fake-claude": (3.0, 15.0), "fake-judge": (1.0, 2.0)}  # USD per Mtok in/out


def cli(module: str, *args: str, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    """`python -m prefray.X *args`, run in this process (tests/conftest.py: command_here)."""
    done = command_here(module.removeprefix("prefray."), *args)
    assert done.returncode in codes, f"{module} {args}\n{done.stdout}\n{done.stderr}"
    return done


def rows(run_dir: Path) -> list[dict]:
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


def server_dollars(stats: dict) -> float:
    from tests.test_reliability_ledger import server_dollars as billed  # prompt-cache prices included

    return billed(stats, PRICES)


@pytest.mark.e2e
def test_budget_is_never_exceeded_across_concurrent_jobs(run_cli, fake_server, tmp_path):
    budget = 0.02
    run_dir = tmp_path / "run"
    run_cli("-m", "benchmark=benchpres", "condition=all", "model=fake,fake-anthropic", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", "limit=6", f"run.budget_usd={budget}",
            "run.cache=false", "run.shard_size=4", expect_code=3)
    stats = fake_server.stats()
    assert 0 < server_dollars(stats) <= budget
    stored = rows(run_dir)
    assert sum(r["cost_usd"] for r in stored) <= budget
    assert abs(sum(r["cost_usd"] for r in stored) - server_dollars(stats)) < 1e-9  # ledger == server
    skipped = [r for r in stored if r["status"] == "skipped"]
    assert skipped and {r["cause"] for r in skipped} == {"budget"}
    assert {r["model"] for r in stored} == {"fake", "fake-anthropic"}
    with open(run_dir / "metrics.csv") as handle:
        metrics = list(csv.DictReader(handle))
    assert any(m["complete"] == "false" for m in metrics)
    assert "Incomplete cells" in (run_dir / "metrics.md").read_text()
    with open(run_dir / "costs.csv") as handle:
        assert abs(sum(float(r["cost_usd"]) for r in csv.DictReader(handle)) - server_dollars(stats)) < 1e-9


@pytest.mark.e2e
def test_cache_shared_across_run_dirs_and_bypass(run_cli, fake_server, tmp_path):
    base = ["benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(), "limit=2"]
    run_cli(*base, f"run.dir={tmp_path / 'first'}")
    sent = fake_server.stats()["requests"]
    assert sent > 0
    run_cli(*base, f"run.dir={tmp_path / 'second'}")  # same outputs root → same cache
    assert fake_server.stats()["requests"] == sent
    assert all(r["cached"] and r["cost_usd"] == 0 for r in rows(tmp_path / "second"))
    run_cli(*base, f"run.dir={tmp_path / 'third'}", "run.cache=false")
    assert fake_server.stats()["requests"] == 2 * sent
    with open(tmp_path / "first" / "metrics.csv") as a, open(tmp_path / "second" / "metrics.csv") as b:
        assert a.read() == b.read()


def _failed_by_model(stored: list[dict], causes: set[str] | None = None) -> Counter:
    return Counter(r["model_id"] for r in stored
                   if r["status"] == "failed" and (causes is None or r["cause"] in causes))


@pytest.mark.e2e
def test_rerun_sends_exactly_the_failed_units(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--fault-rate", "0.3", "--faults", "429,500,malformed")
    run_dir = tmp_path / "run"
    common = ["benchmark=benchpres", "model=fake", "judge=fake", *server.model_overrides(), "limit=4"]
    run_cli(*common, f"run.dir={run_dir}", "model.max_attempts=1", "judge.max_attempts=1", "run.cache=false",
            expect_code=3)
    first = rows(run_dir)
    rate_limited = _failed_by_model(first, {"rate_limit"})
    assert sum(rate_limited.values()) > 0 and sum(_failed_by_model(first).values()) > sum(rate_limited.values())

    before = server.stats()["by_model"]
    cli("prefray.rerun", str(run_dir), "causes=rate_limit", "run.cache=false", codes=(3,))
    after = server.stats()["by_model"]
    sent = Counter({m: after.get(m, 0) - before.get(m, 0) for m in after})
    second = rows(run_dir)
    new_generations = [r for r in second if r["stage"] == "generate" and r["attempt"] == 2 and r["status"] == "ok"]
    # generation: exactly the rate-limited generations; judge: the rate-limited judge units plus the
    # 4 preference verdicts and 1 completeness score of every generation that now succeeded
    assert sent["fake-model"] == rate_limited["fake-model"]
    assert sent["fake-judge"] == rate_limited["fake-judge"] + 5 * len(new_generations)
    assert {r["attempt"] for r in second} == {1, 2}
    assert len(second) == len(first) + sum(rate_limited.values()) + 5 * len(new_generations)

    # every cause; units first created by a rerun meet the server's first-arrival faults too,
    # so a second pass finishes them
    for _ in range(2):
        cli("prefray.rerun", str(run_dir), "run.cache=false", codes=(0, 3))
    best = {}
    for r in sorted(rows(run_dir), key=lambda r: r["attempt"]):
        best[r["unit_id"]] = r
    assert all(r["status"] == "ok" for r in best.values())
    clean = tmp_path / "clean"
    run_cli(*common, f"run.dir={clean}", "run.cache=false")
    with open(run_dir / "metrics.csv") as a, open(clean / "metrics.csv") as b:
        assert a.read() == b.read()


@pytest.mark.e2e
def test_rejudge_sends_no_generation_and_matches_expectation(run_cli, fake_server, tmp_path):
    from tests.test_sweep_two_sdks import expected_rates

    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={run_dir}", "limit=4")
    generations = fake_server.stats()["by_model"]["fake-model"]
    cli("prefray.rejudge", str(run_dir), "judge=fake-anthropic", f"judge.base_url={fake_server.anthropic_url}")
    stats = fake_server.stats()
    assert stats["by_model"]["fake-model"] == generations
    assert stats["by_model"]["fake-claude-judge"] == 4 * 3 * 5  # 4 verdicts + 1 completeness per response
    with open(run_dir / "metrics.csv") as handle:
        metrics = {(r["judge"], r["metric"]): float(r["value"]) for r in csv.DictReader(handle)}
    expected = expected_rates(run_dir, "fake", limit=4)
    for judge in ("fake", "fake-anthropic"):
        assert metrics[(judge, "MR")] == expected["MR"] and metrics[(judge, "AAR")] == expected["AAR"]
    with open(run_dir / "judge_agreement.csv") as handle:
        agreement = {r["stage"]: r for r in csv.DictReader(handle)}
    assert agreement["judge"]["n"] == "48" and float(agreement["judge"]["percent_agreement"]) == 1.0


@pytest.mark.e2e
def test_estimate_matches_real_usage(run_cli, fake_server, tmp_path):
    run_dir = tmp_path / "run"
    args = ["-m", "benchmark=benchpres", "condition=all", "model=fake", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", "limit=3"]
    estimate_csv = tmp_path / "estimate.csv"
    cli("prefray.plan", *args, "--csv", str(estimate_csv))
    assert not run_dir.exists() and fake_server.stats()["requests"] == 0
    assert not (tmp_path / ".prefray-cache").exists()  # an estimate writes nothing, no cache either
    run_cli(*args)
    stored = rows(run_dir)
    real_calls = Counter(r["stage"] for r in stored)
    with open(estimate_csv) as handle:
        lines = {r["stage"]: r for r in csv.DictReader(handle) if r["model"] == "fake"}
    # calls: exact, per stage
    assert {stage: int(r["calls"]) for stage, r in lines.items()} == dict(real_calls)
    # generation input tokens: within 10% of what the server counted (characters / 4 both ways)
    real_in = sum(r["input_tokens"] for r in stored if r["stage"] == "generate")
    assert abs(int(lines["generate"]["input_tokens"]) - real_in) <= 0.10 * real_in


def test_estimate_counts_later_stages_of_free_text_answers(tmp_path):
    """CUPID's inference answers must carry a "Preference:" line; the estimate stands in the
    stage's example answer for simulated text that lacks it, so every inference is decomposed."""
    estimate_csv = tmp_path / "estimate.csv"
    cli("prefray.plan", "-m", "benchmark=cupid", "condition=full,oracle", "model=gpt-4o", "judge=gpt-4o",
        f"run.dir={tmp_path / 'never'}", "--csv", str(estimate_csv))
    with open(estimate_csv) as handle:
        calls = {r["stage"]: int(r["calls"]) for r in csv.DictReader(handle)}
    assert calls["infer"] == calls["decompose"] == 2 * 6  # 2 conditions × 6 sample instances
    assert not (tmp_path / "never").exists()
