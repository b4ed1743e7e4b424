"""Judge panels: the panel's verdict per unit, α among judges with the effective number of judges, and
`judge=panel(a,b)` in a launch and a rejudge (each judge scores the same stored answers)."""

from __future__ import annotations

import csv
import json
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy import stats

from prefray.app.panel import SEED_STRIDE, panel_members, panel_overrides, repeated, split_repeats, with_repeats
from prefray.app.sweep import SweepError
from prefray.engine.calls.output_budget import final_request
from prefray.engine.results.agreement import (
    PANEL_AGREEMENT_SCHEMA,
    Uncombinable,
    combine,
    effective_judges,
    judge_agreement,
    judge_values,
    panel_rows,
)
from prefray.engine.results.alpha import krippendorff_alpha
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.cache import cache_key
from prefray.engine.rundir.paid import read_paid
from prefray.engine.rundir.shards import SHARD_SCHEMA, latest_attempts, read_rows
from prefray.engine.types import ChatRequest, ModelSpec
from tests.test_agreement import judged, table


def test_combine_rules():
    assert combine([True, True, False]) is True
    assert combine([False, True]) is False and combine([True, False]) is True    # a tie: the chair's
    assert combine([2, 5, 8]) == 5.0
    assert combine([[1, 0.5], [0, 0.5]]) == [0.5, 0.5]
    assert combine([{"rationale": "a", "applied": True, "score": 4},
                    {"rationale": "b", "applied": False, "score": 1},
                    {"rationale": "c", "applied": False, "score": 1}]) == {"rationale": "a", "applied": False,
                                                                          "score": 2.0}
    with pytest.raises(Uncombinable):
        combine([[1, 0], [1]])


def shard_row(judge: str, instance: str, parsed: object | None, status: str = "ok", cause: str = "",
              item: str | None = None) -> dict:
    row = {field.name: None for field in SHARD_SCHEMA}
    row.update({"unit_id": f"{judge}-{instance}", "attempt": 0, "benchmark": "b", "model": "m", "condition": "c",
                "stage": "judge", "role": "judge", "judge": judge, "instance_id": instance,
                "item": judge if item is None else item, "sample": 0, "status": status, "cause": cause,
                "parsed_json": None if parsed is None else json.dumps(parsed),
                "meta_json": json.dumps({"judge": judge}),
                "cost_usd": 0.5, "input_tokens": 10, "output_tokens": 5})
    return row


def test_panel_rows_combine_members_and_keep_failures():
    rows = [shard_row("a", "u1", {"score": 2}), shard_row("b", "u1", {"score": 4}),
            shard_row("a", "u2", {"score": 3}), shard_row("b", "u2", None, "failed", "timeout"),
            shard_row("a", "u3", {"score": 5}),                               # b never judged u3
            shard_row("a", "u4", {"s": [1, 0]}), shard_row("b", "u4", {"s": [1]}),
            {**shard_row("", "u1", None), "role": "subject", "judge": "", "stage": "generate"}]
    made = panel_rows(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), {"b": ["a", "b"]})
    by_unit = {r["instance_id"]: r for r in made.to_pylist()}
    assert set(by_unit) == {"u1", "u2", "u4"}
    assert all(r["judge"] == r["item"] == "panel(a,b)" and r["cost_usd"] == 0 for r in by_unit.values())
    assert json.loads(by_unit["u1"]["parsed_json"]) == {"score": 3.0} and by_unit["u1"]["status"] == "ok"
    assert json.loads(by_unit["u1"]["meta_json"]) == {"judge": "panel(a,b)"}
    assert (by_unit["u2"]["status"], by_unit["u2"]["cause"]) == ("failed", "timeout")
    assert (by_unit["u4"]["status"], by_unit["u4"]["cause"]) == ("failed", "parse_error")
    assert panel_rows(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), {"b": ["a"]}).num_rows == 0


def test_alpha_among_judges_and_the_effective_number_of_judges():
    verdicts = {"j1": [True, True, False, True, False, True],
                "j2": [True, False, False, True, False, True],
                "j3": [False, True, False, True, True, True]}
    rows = [r for judge, values in verdicts.items() for r in judged(judge, values)]
    agreement = judge_agreement(judge_values(table(rows)), resamples=200)
    assert agreement.schema == PANEL_AGREEMENT_SCHEMA
    found = {(r["judge_a"], r["judge_b"]): r for r in agreement.to_pylist()}
    matrix = np.array([[float(v) for v in values] for values in verdicts.values()])
    panel = found[("panel", "j1,j2,j3")]
    assert panel["alpha"] == pytest.approx(krippendorff_alpha(matrix, "nominal"))
    assert panel["alpha_ci_low"] <= panel["alpha"] <= panel["alpha_ci_high"]
    assert panel["n"] == 6 and panel["percent_agreement"] == pytest.approx(3 / 6)
    phi = [stats.pearsonr(matrix[i], matrix[j])[0] for i, j in combinations(range(3), 2)]
    assert panel["n_eff"] == pytest.approx(3 / (1 + 2 * np.mean(phi)))
    pair = found[("j1", "j2")]
    assert pair["alpha"] == pytest.approx(krippendorff_alpha(matrix[:2], "nominal"))
    assert effective_judges(6, [0.5]) == pytest.approx(6 / 3.5)
    assert effective_judges(3, [1.0]) == 1.0 and effective_judges(3, [-0.9]) == 3.0 and effective_judges(3, []) is None


def test_one_judge_keeps_the_old_header():
    assert judge_agreement(judge_values(table(judged("j1", [True, False])))).num_rows == 0
    assert judge_agreement(judge_values(table(judged("j1", [True])))).column_names[-1] == "spearman"


def test_panel_override():
    assert panel_overrides(["model=fake", "judge=panel(a, b)"], False) == \
        (["model=fake", "judge=a,b", "run.panel=true"], True)
    assert panel_overrides(["judge=a"], False) == (["judge=a"], False)
    for bad in (["judge=panel(a)"], ["judge=panel(a,a)"], ["judge=panel(a,b"]):
        with pytest.raises(SweepError):
            panel_members(bad)


def test_repeats_are_copies_of_the_judge_with_seeds_of_their_own():
    assert split_repeats(["judge=fake", "judge.repeats=3", "limit=2"]) == (["judge=fake", "limit=2"], 3)
    assert split_repeats(["judge=fake"]) == (["judge=fake"], 1)
    for bad in ("judge.repeats=0", "judge.repeats=two"):
        with pytest.raises(SweepError):
            split_repeats([bad])
    judge = {"name": "fake", "provider": "openai", "model_id": "fake-judge"}
    copies = repeated(judge, 3)
    assert [c["name"] for c in copies] == ["fake", "fake~2", "fake~3"]
    assert [c.get("seed_offset", 0) for c in copies] == [0, SEED_STRIDE, 2 * SEED_STRIDE]
    configs = with_repeats([{"judge": judge, "run": {"seed": 0}}], 2)
    assert [c["judge"]["name"] for c in configs] == ["fake", "fake~2"] and all(c["run"]["panel"] for c in configs)
    # a repeat sends the same request with its seed moved, and never shares the first one's cache entry
    first, second = (ModelSpec.from_config(c) for c in copies[:2])
    request = ChatRequest(({"role": "user", "content": "rate"},), seed=5)
    assert final_request(first, request).seed == 5 and final_request(second, request).seed == 5 + SEED_STRIDE
    assert final_request(second, request).messages == final_request(first, request).messages
    assert cache_key(first, final_request(first, request), 0) != cache_key(second, final_request(second, request), 0)


def panel_alignment(run_dir, members: list[str]) -> float:
    """The panel's alignment recomputed from the stored judge rows: the mean over units of the members' mean."""
    rows = latest_attempts(read_rows(RunDir(run_dir), None)).filter(pc.equal(pc.field("stage"), "judge")).to_pylist()
    scores: dict[str, list[float]] = {}
    for row in rows:
        if row["judge"] in members and row["status"] == "ok":
            scores.setdefault(row["instance_id"], []).append(json.loads(row["parsed_json"])["score"])
    return float(np.mean([np.mean(v) for v in scores.values() if len(v) == len(members)]))


def metric(run_dir, judge: str, name: str) -> float:
    with (run_dir / "metrics.csv").open() as handle:
        (value,) = [float(r["value"]) for r in csv.DictReader(handle) if r["judge"] == judge and r["metric"] == name]
    return value


@pytest.mark.e2e
def test_a_panel_of_two_fake_judges_and_a_rejudge_with_a_panel(tmp_path, run_cli):
    from tests.conftest import command_here

    run_dir = tmp_path / "run"
    common = ("benchmark=cupid", "condition=oracle_preference", "model=fake", "limit=3", "run.cache=false")
    run_cli(*common, "judge=panel(fake,fake-anthropic)", f"run.dir={run_dir}")
    panel = "panel(fake,fake-anthropic)"
    for judge in ("fake", "fake-anthropic", panel):
        assert not np.isnan(metric(run_dir, judge, "alignment"))
    assert metric(run_dir, panel, "alignment") == pytest.approx(panel_alignment(run_dir, ["fake", "fake-anthropic"]))
    with (run_dir / "judge_agreement.csv").open() as handle:
        rows = {(r["judge_a"], r["judge_b"]): r for r in csv.DictReader(handle)}
    assert {("fake", "fake-anthropic"), ("panel", "fake,fake-anthropic")} <= set(rows)
    assert rows[("panel", "fake,fake-anthropic")]["alpha"] != ""

    # a run judged by one judge, judged again by a panel: no generation call is sent
    other = tmp_path / "other"
    run_cli(*common, "judge=fake", f"run.dir={other}")
    generated = read_paid(RunDir(other)).filter(pc.equal(pc.field("model_id"), "fake-model")).num_rows
    done = command_here("rejudge", str(other), "judge=panel(fake,fake-anthropic)", "run.plots=false")
    assert done.returncode == 0, done.stdout + done.stderr
    assert read_paid(RunDir(other)).filter(pc.equal(pc.field("model_id"), "fake-model")).num_rows == generated
    assert metric(other, panel, "alignment") == pytest.approx(panel_alignment(other, ["fake", "fake-anthropic"]))


@pytest.mark.e2e
def test_judge_repeats_ask_again_with_other_seeds(tmp_path, run_cli):
    run_dir = tmp_path / "run"
    run_cli("benchmark=cupid", "condition=oracle_preference", "model=fake", "judge=fake", "judge.repeats=2",
            "limit=3", "run.cache=false", f"run.dir={run_dir}")
    rows = latest_attempts(read_rows(RunDir(run_dir), None)).filter(pc.equal(pc.field("stage"), "judge")).to_pylist()
    seeds = {(r["judge"], r["instance_id"]): r["seed"] for r in rows}
    assert {j for j, _ in seeds} == {"fake", "fake~2"}
    assert all(seeds[("fake~2", i)] == seeds[("fake", i)] + SEED_STRIDE for _, i in seeds)
    panel = "panel(fake,fake~2)"
    assert metric(run_dir, panel, "alignment") == pytest.approx(panel_alignment(run_dir, ["fake", "fake~2"]))
    with (run_dir / "judge_agreement.csv").open() as handle:
        (row,) = [r for r in csv.DictReader(handle) if r["judge_a"] == "panel"]
    assert row["judge_b"] == "fake,fake~2" and row["alpha"] != ""
