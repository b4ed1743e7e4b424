"""CUPID: metrics by hand, parsers, oracle selection, loader, and end to end through the real CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from prefray.benchmarks.cupid import BENCHMARK
from prefray.benchmarks.cupid.benchmark import infer_messages, render_log, render_session, summarize_messages
from prefray.benchmarks.cupid.data import SAMPLE_PATH, load_instances, oracle_indices
from prefray.benchmarks.cupid.prompting import decompose_messages, judge_prompt, match_messages
from prefray.benchmarks.cupid.scoring import DECOMPOSE_SCHEMA, JUDGE_SCHEMA, match_schema, parse_preference
from prefray.benchmarks.cupid.settings import CupidSettings
from prefray.engine.benchmark import DataError, Job, ParseError, StageContext
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.types import ChatRequest, ModelSpec
from prefray.fakellm.answers import answer_json, answer_text

SETTINGS = BENCHMARK.settings_of({})   # cupid.yaml's values (the settings' defaults)

SAMPLE_ROWS = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines() if line.strip()]
COVER = {"fully covered": 1.0, "partially covered": 0.5, "not covered": 0.0}


# -- metrics on hand-written instances, against the reference evaluation's rules --------------------
def row(stage: str, instance: str, item: str = "", parsed=None, status: str = "ok", meta=None,
        cause: str | None = None, **extra) -> dict:
    role = {"decompose": "decomposer", "match": "matcher", "judge": "judge"}.get(stage, "subject")
    return {"unit_id": f"{stage}/{instance}/{item}", "attempt": 1, "benchmark": "cupid", "model": "m",
            "condition": "full", "stage": stage, "role": role, "judge": "" if role == "subject" else "j",
            "instance_id": instance, "item": item, "sample": 0, "meta_json": json.dumps(meta or {}),
            "status": status, "cause": cause if cause is not None else ("parse_error" if status == "failed" else ""),
            "parsed_json": None if parsed is None else json.dumps(parsed), "text": "", **extra}


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{k: r.get(k) for k in SHARD_SCHEMA.names} for r in rows], schema=SHARD_SCHEMA)


def reference_prf(counted: list[tuple[float, float, int, int]]) -> tuple[float, float, float]:
    """The reference aggregation: (true_matched, predicted_matched, n_true, n_predicted) summed over
    instances, precision = Σ predicted_matched / Σ n_predicted (0 if none), recall likewise, F1."""
    tm, pm, nt, npred = (sum(c[i] for c in counted) for i in range(4))
    precision = pm / npred if npred > 0 else 0
    recall = tm / nt if nt > 0 else 0
    return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall > 0 else 0)


def fixture_table() -> pa.Table:
    sub = lambda n: {"n_true": n}  # noqa: E731
    j = {"judge": "j"}
    ok_infer = lambda i, n: row("infer", i, parsed={"preference": "x"}, meta=sub(n))  # noqa: E731
    rows = [
        # A: 2 inferred items rated [1, .5]; 3 true items rated [1, 0, .5]
        ok_infer("p1|consistent", 3), row("decompose", "p1|consistent", "j", {"checklist": ["q1", "q2"]}, meta=j),
        row("match", "p1|consistent", "j|precision", {"scores": [1.0, 0.5]}, meta=j),
        row("match", "p1|consistent", "j|recall", {"scores": [1.0, 0.0, 0.5]}, meta=j),
        # B: the inferred preference decomposes into nothing: 0 of 0 inferred, 0 of 2 true
        ok_infer("p1|contrastive", 2), row("decompose", "p1|contrastive", "j", {"checklist": []}, meta=j),
        # C: the matcher rated 1 of 3 inferred items, and 2 when asked again (a judge failure: excluded, counted)
        ok_infer("p1|changing", 4), row("decompose", "p1|changing", "j", {"checklist": ["q1", "q2", "q3"]}, meta=j),
        row("match", "p1|changing", "j|precision", {"scores": [0.5]}, meta=j),
        row("rematch", "p1|changing", "j|precision", {"scores": [1.0, 1.0]}, meta=j),
        row("match", "p1|changing", "j|recall", {"scores": [1.0, 1.0, 1.0, 1.0]}, meta=j),
        # D, E: the inference stayed unreadable / overflowed the context: scored 0 (0 of 0, 0 of t)
        row("infer", "p2|consistent", status="failed", cause="parse_error", meta=sub(2)),
        row("infer", "p2|contrastive", status="failed", cause="context_overflow", meta=sub(3)),
        # F: the recall matcher answer stayed unreadable: judge failure
        ok_infer("p2|changing", 2), row("decompose", "p2|changing", "j", {"checklist": ["q1", "q2"]}, meta=j),
        row("match", "p2|changing", "j|precision", {"scores": [1.0, 1.0]}, meta=j),
        row("match", "p2|changing", "j|recall", status="failed", cause="parse_error", meta=j),
        # G: never answered (rate limits to the end): no answer, excluded
        row("infer", "p3|consistent", status="failed", cause="rate_limit", meta=sub(2)),
        # H: 1 inferred item rated [1]; 2 true items rated [.5, .5]
        ok_infer("p3|contrastive", 2), row("decompose", "p3|contrastive", "j", {"checklist": ["q1"]}, meta=j),
        row("match", "p3|contrastive", "j|precision", {"scores": [1.0]}, meta=j),
        row("match", "p3|contrastive", "j|recall", {"scores": [0.5, 0.5]}, meta=j),
        # I: the decomposer's answer stayed unreadable: judge failure
        ok_infer("p3|changing", 3), row("decompose", "p3|changing", "j", status="failed", meta=j),
        # J: 1 rating for 2 inferred items, put right when asked again: [1, 0]; 2 true items rated [1, 1]
        ok_infer("p4|consistent", 2), row("decompose", "p4|consistent", "j", {"checklist": ["q1", "q2"]}, meta=j),
        row("match", "p4|consistent", "j|precision", {"scores": [1.0]}, meta=j),
        row("rematch", "p4|consistent", "j|precision", {"scores": [1.0, 0.0]}, meta=j),
        row("match", "p4|consistent", "j|recall", {"scores": [1.0, 1.0]}, meta=j),
        # K: a wrong number of ratings whose re-ask has not been answered yet: no answer
        ok_infer("p4|contrastive", 2), row("decompose", "p4|contrastive", "j", {"checklist": ["q1"]}, meta=j),
        row("match", "p4|contrastive", "j|precision", {"scores": [1.0, 1.0]}, meta=j),
        row("match", "p4|contrastive", "j|recall", {"scores": [1.0, 1.0]}, meta=j),
        # generation: A 8.5, B 7, C judge unreadable (excluded), D overflow (0, as the reference), E timeout
        row("generate", "p1|consistent", meta=sub(3)), row("judge", "p1|consistent", "j", {"score": 8.5}, meta=j),
        row("generate", "p1|contrastive", meta=sub(2)), row("judge", "p1|contrastive", "j", {"score": 7.0}, meta=j),
        row("generate", "p1|changing", meta=sub(4)), row("judge", "p1|changing", "j", status="failed", meta=j),
        row("generate", "p2|consistent", status="failed", cause="context_overflow", meta=sub(2)),
        row("generate", "p2|contrastive", status="failed", cause="timeout", meta=sub(3)),
    ]
    return table_of(rows)


def per_instance_prf(counted: list[tuple[float, float, int, int]]) -> tuple[float, float, float, float]:
    """Paper §2.3 per instance, then the mean over instances (Table 1): P_i = predicted_matched / n_predicted
    (0 when nothing was inferred), R_i = true_matched / n_true; F1 = 2 P̄ R̄ / (P̄ + R̄) of the means (every
    triple of Tables 1, 9 and 11), and the mean of F1_i = 2 P_i R_i / (P_i + R_i)."""
    ps = [c[1] / c[3] if c[3] else 0.0 for c in counted]
    rs = [c[0] / c[2] if c[2] else 0.0 for c in counted]
    fs = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(ps, rs)]
    p, r = sum(ps) / len(ps), sum(rs) / len(rs)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0), sum(fs) / len(fs)


def test_metrics_follow_the_paper_per_instance_and_keep_the_pooled_ratios():
    table = BENCHMARK.metrics(fixture_table(), SETTINGS).to_pylist()
    got = {r["metric"]: (r["value"], r["n"], r["excluded"]) for r in table}
    assert {r["judge"] for r in table} == {"j"}
    # (true_matched, predicted_matched, n_true, n_predicted) of the scored instances A, B, D, E, H, J
    scored = {"A": (1.5, 1.5, 3, 2), "B": (0, 0, 2, 0), "D": (0, 0, 2, 0), "E": (0, 0, 3, 0), "H": (1.0, 1.0, 2, 1),
              "J": (2.0, 1.0, 2, 2)}
    p, r, f, f_mean = per_instance_prf(list(scored.values()))
    # by hand: P_i = .75, 0, 0, 0, 1, .5; R_i = .5, 0, 0, 0, .5, 1; F1_i = .6, 0, 0, 0, 2/3, 2/3
    # P̄ = 2.25/6 = .375, R̄ = 2/6; F1 = 2 · .375 · (1/3) / (.375 + 1/3) = .25 / (17/24) = 6/17
    assert (p, r, f, f_mean) == (pytest.approx(2.25 / 6), pytest.approx(2 / 6), pytest.approx(6 / 17),
                                 pytest.approx((0.6 + 4 / 3) / 6))
    excluded = 5  # C (matcher length), F (matcher unreadable), I (decomposer unreadable), G and K (no answer)
    assert got["precision"] == (pytest.approx(p), 6, excluded)
    assert got["recall"] == (pytest.approx(r), 6, excluded)
    assert got["F1"] == (pytest.approx(6 / 17), 6, excluded)
    assert got["F1_instance_mean"] == (pytest.approx((0.6 + 4 / 3) / 6), 6, excluded)
    # the reference code's pooled ratios; n counts the instances that put items into the pool:
    # precision pools A, H, J only (B, D, E inferred no item: not averaged, counted as excluded)
    pp, rp, fp = reference_prf(list(scored.values()))
    assert (pp, rp) == (pytest.approx(3.5 / 5), pytest.approx(4.5 / 14))
    assert got["precision_pooled"] == (pytest.approx(pp), 3, 11 - 3)
    assert got["recall_pooled"] == (pytest.approx(rp), 6, excluded)
    assert got["F1_pooled"] == (pytest.approx(fp), 6, excluded)
    assert got["failures_model[task=inference]"][:2] == (2.0, 11)
    assert got["failures_judge[task=inference]"][:2] == (3.0, 11)
    assert got["no_answer[task=inference]"][:2] == (2.0, 11)
    assert got["matcher_length_mismatch"][:2] == (1.0, 11)
    # per type: consistent = A, D, J scored (G no answer); contrastive = B, E, H (K no answer)
    pc, rc, fc, fc_mean = per_instance_prf([scored["A"], scored["D"], scored["J"]])
    # by hand: P̄ = (.75 + 0 + .5)/3 = 5/12, R̄ = (.5 + 0 + 1)/3 = .5; F1 = (5/12) / (11/12) = 5/11
    assert (fc, fc_mean) == (pytest.approx(5 / 11), pytest.approx((0.6 + 2 / 3) / 3))
    assert got["precision[instance_type=consistent]"] == (pytest.approx(pc), 3, 1)
    assert got["recall[instance_type=consistent]"] == (pytest.approx(rc), 3, 1)
    assert got["F1[instance_type=consistent]"] == (pytest.approx(5 / 11), 3, 1)
    assert got["F1_instance_mean[instance_type=consistent]"] == (pytest.approx(fc_mean), 3, 1)
    assert got["precision[instance_type=contrastive]"] == (pytest.approx(per_instance_prf(
        [scored["B"], scored["E"], scored["H"]])[0]), 3, 1)
    assert got["precision_pooled[instance_type=contrastive]"] == (pytest.approx(1.0), 1, 3)  # H's 1 of 1
    assert math.isnan(got["precision[instance_type=changing]"][0])
    assert math.isnan(got["F1[instance_type=changing]"][0]) and got["F1[instance_type=changing]"][1:] == (0, 3)
    assert got["precision[instance_type=changing]"][1:] == (0, 3)
    assert math.isnan(got["precision_pooled[instance_type=changing]"][0])
    # alignment: (8.5 + 7 + 0) / 3; C's judge unreadable and E never answered are excluded
    assert got["alignment"] == (pytest.approx(15.5 / 3), 3, 2)
    assert got["failures_model[task=generation]"][:2] == (1.0, 5)
    assert got["failures_judge[task=generation]"][:2] == (1.0, 5)
    assert got["no_answer[task=generation]"][:2] == (1.0, 5)
    assert got["alignment[instance_type=changing]"][1:] == (0, 1)
    assert got["parse_failures_infer"][:2] == (1.0, 11)
    assert got["parse_failures_rematch"][:2] == (0.0, 2)
    assert got["parse_failures_judge"][:2] == (1.0, 3)


def scored_instance(instance: str, inferred: list[float], true: list[float], condition: str = "full") -> list[dict]:
    """One instance whose inferred items were rated `inferred` and whose true items `true`."""
    j = {"judge": "j"}
    checklist = [f"q{i}" for i in range(len(inferred))]
    rows = [row("infer", instance, parsed={"preference": "x"}, meta={"n_true": len(true)}, condition=condition),
            row("decompose", instance, "j", {"checklist": checklist}, meta=j, condition=condition),
            row("match", instance, "j|recall", {"scores": true}, meta=j, condition=condition)]
    if inferred:
        rows.append(row("match", instance, "j|precision", {"scores": inferred}, meta=j, condition=condition))
    return rows


def test_f1_is_the_f1_of_the_mean_precision_and_recall_in_every_slice():
    """Table 1's P, R and F1 are "averaged across all instances" and each printed F1 is 2 P̄ R̄ / (P̄ + R̄)
    of the printed P and R (e.g. Mistral 7B, all instances: 2 · 26.9 · 30.7 / 57.6 = 28.7, printed 28.6)."""
    rows = [*scored_instance("p1|consistent", [1.0], [0.0, 0.0]),              # P 1,  R 0    F1_i 0
            *scored_instance("p2|consistent", [0.0, 0.0], [1.0]),              # P 0,  R 1    F1_i 0
            *scored_instance("p1|contrastive", [1.0], [1.0]),                  # P 1,  R 1    F1_i 1
            *scored_instance("p2|contrastive", [1.0, 0.0], [1.0, 0, 0, 0]),    # P .5, R .25  F1_i 1/3
            *scored_instance("p1|changing", [], [0.0, 0.0, 0.0]),              # P 0,  R 0    F1_i 0 (empty checklist)
            *scored_instance("p2|changing", [0.5], [0.5, 0.5]),                # P .5, R .5   F1_i .5
            *scored_instance("p1|consistent", [1.0], [0.0], "oracle"),         # P 1,  R 0    F1_i 0
            *scored_instance("p2|consistent", [0.5, 0.5], [1.0], "oracle")]    # P .5, R 1    F1_i 2/3
    got = {(r["condition"], r["metric"]): (r["value"], r["n"])
           for r in BENCHMARK.metrics(table_of(rows), SETTINGS).to_pylist()}
    # by hand, slice: (P̄, R̄) → F1 = 2 P̄ R̄ / (P̄ + R̄); the mean of F1_i
    want = {
        ("full", ""): ((1 + 0 + 1 + .5 + 0 + .5) / 6, (0 + 1 + 1 + .25 + 0 + .5) / 6, 11 / 23, (1 + 1 / 3 + .5) / 6),
        ("full", "[instance_type=consistent]"): (.5, .5, .5, 0.0),
        ("full", "[instance_type=contrastive]"): (.75, .625, 15 / 22, (1 + 1 / 3) / 2),
        ("full", "[instance_type=changing]"): (.25, .25, .25, .25),
        ("oracle", ""): (.75, .5, .6, 1 / 3),
    }
    for (condition, suffix), (p, r, f, f_mean) in want.items():
        assert f == pytest.approx(2 * p * r / (p + r))   # the hand values above agree with the formula
        n = 6 if (condition, suffix) == ("full", "") else 2
        assert got[(condition, "precision" + suffix)] == (pytest.approx(p), n)
        assert got[(condition, "recall" + suffix)] == (pytest.approx(r), n)
        assert got[(condition, "F1" + suffix)] == (pytest.approx(f), n), (condition, suffix)
        assert got[(condition, "F1_instance_mean" + suffix)] == (pytest.approx(f_mean), n)
    # all instances: 11/23 = 47.8 where the mean of per-instance F1 gives 11/36 = 30.6
    assert got[("full", "F1")][0] == pytest.approx(0.4783, abs=1e-4)
    assert got[("full", "F1_instance_mean")][0] == pytest.approx(0.3056, abs=1e-4)


def test_f1_interval_resamples_personas_and_recomputes_the_f1_of_the_means():
    """Two personas: p1 (P̄ 2/3, R̄ 1/3 over its three instances), p2 (P̄ 1/3, R̄ 7/12). A resample of two
    personas draws p1 p1 (p=1/4), p1 p2 or p2 p1 (p=1/2) or p2 p2 (p=1/4); F1 of the drawn means:
    p1 p1: 2 · (2/3)(1/3) / 1 = 4/9; mixed: P̄ 1/2, R̄ 11/24 → 11/23; p2 p2: 2 · (1/3)(7/12) / (11/12) = 14/33.
    The 95% interval spans the smallest to the largest: [14/33, 11/23]."""
    from prefray.engine.results.stats import BootstrapSettings, with_intervals

    rows = [*scored_instance("p1|consistent", [1.0], [0.0, 0.0]), *scored_instance("p2|consistent", [0.0, 0.0], [1.0]),
            *scored_instance("p1|contrastive", [1.0], [1.0]),
            *scored_instance("p2|contrastive", [1.0, 0.0], [1.0, 0, 0, 0]),
            *scored_instance("p1|changing", [], [0.0, 0.0, 0.0]), *scored_instance("p2|changing", [0.5], [0.5, 0.5])]
    table = table_of(rows)
    metrics = BENCHMARK.metrics(table, SETTINGS)
    out = {r["metric"]: r for r in with_intervals(metrics, table, {"cupid": BENCHMARK}, {"cupid": SETTINGS},
                                                  BootstrapSettings(n_resamples=4000)).to_pylist()}
    assert out["F1"]["value"] == pytest.approx(11 / 23)
    assert (out["F1"]["ci_low"], out["F1"]["ci_high"]) == (pytest.approx(14 / 33), pytest.approx(11 / 23))
    # the mean of F1_i keeps the mean's interval over its per-instance units: p1 (0 + 1 + 0)/3 = 1/3,
    # p2 (0 + 1/3 + 1/2)/3 = 5/18, mixed 11/36: [5/18, 1/3]
    mean = out["F1_instance_mean"]
    assert (mean["value"], mean["ci_low"], mean["ci_high"]) == (pytest.approx(11 / 36), pytest.approx(5 / 18),
                                                                pytest.approx(1 / 3))


def test_summaries_never_answered_exclude_while_a_model_failure_leaves_the_summary_empty():
    tasks = {"tasks": ["inference", "generation"], "n_true": 2}
    rows = [row("summarize", "p|consistent", f"session{i}", {"summary": "s"}, meta=tasks) for i in range(8)]
    rows.append(row("summarize", "p|changing", "session0", status="failed", cause="timeout", meta=tasks))
    rows.append(row("summarize", "p|contrastive", "session0", status="failed", cause="context_overflow", meta=tasks))
    rows += [row("infer", "p|consistent", parsed={"preference": "x"}, meta=tasks),
             row("decompose", "p|consistent", "j", {"checklist": []}, meta={"judge": "j"}),
             row("generate", "p|consistent", meta=tasks),
             row("judge", "p|consistent", "j", {"score": 4.0}, meta={"judge": "j"}),
             # the overflowed summary is left empty: the chain goes on, and this inference is unreadable
             row("infer", "p|contrastive", status="failed", cause="parse_error", meta=tasks)]
    got = {r["metric"]: (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(table_of(rows), SETTINGS).to_pylist()}
    # consistent: empty checklist -> 0 of 0, 0 of 2; contrastive: model failure -> 0 of 0, 0 of 2
    assert got["precision"] == (0.0, 2, 1) and got["recall"] == (0.0, 2, 1) and got["F1"] == (0.0, 2, 1)
    # no inferred item anywhere: the pooled precision has nothing to average
    assert math.isnan(got["precision_pooled"][0]) and got["precision_pooled"][1:] == (0, 3)
    assert got["recall_pooled"] == (0.0, 2, 1)
    assert got["no_answer[task=inference]"] == (1.0, 3, 0)
    assert got["alignment"] == (4.0, 1, 2)  # contrastive has no generation row yet: no answer
    assert got["parse_failures_summarize"] == (0.0, 10, 0)


# -- oracle selection and what reaches the model -----------------------------------------------------
def job(condition: str, **settings) -> Job:
    spec = ModelSpec(name="fake", provider="openai", model_id="fake-model")
    cond = BENCHMARK.condition_of({"name": condition, **settings})
    return Job("cupid", condition, spec, {"judge": spec}, BENCHMARK.settings_of({"data": {"source": "sample"}}), cond)


def test_oracle_sessions_are_the_same_context_and_preference():
    instances = load_instances("sample", None, None)
    expected = {"consistent": [1, 6], "contrastive": [1, 6], "changing": None}
    for inst, raw in zip(instances, SAMPLE_ROWS):
        want = [i for i, s in enumerate(raw["prior_interactions"])
                if s["context_factor"] == raw["current_context_factor"]
                and s["contextual_preference"] == raw["current_contextual_preference"]]
        assert expected[inst.instance_type] in (None, want)
        units = BENCHMARK._infer_units(StageContext(job("oracle", history="oracle"), [inst]))
        sent = units[0].request.messages[0]["content"]  # the log travels in the user turn
        assert raw["prior_interactions"][0]["dialogue"][0]["content"][:40] not in (units[0].request.system or "")
        shown = [i for i, s in enumerate(raw["prior_interactions"]) if s["dialogue"][0]["content"] in sent]
        assert shown == want
    # "changing": only the latest session(s) with the current preference, not the outdated ones
    changing = {r["persona_id"]: r for r in SAMPLE_ROWS if r["instance_type"] == "changing"}
    assert [i for i, s in enumerate(changing["03+chemistry_teacher"]["prior_interactions"])
            if s["context_factor"] == changing["03+chemistry_teacher"]["current_context_factor"]] == [0, 4, 7]


def test_hidden_fields_never_reach_the_model():
    instances = load_instances("sample", None, None)
    for name, settings in (("full", {}), ("oracle", {"history": "oracle"})):
        ctx = StageContext(job(name, **settings), instances)
        for unit in BENCHMARK._infer_units(ctx) + BENCHMARK._generate_units(ctx):
            inst = next(i for i in instances if i.instance_id == unit.instance_id)
            sent = (unit.request.system or "") + "".join(m["content"] for m in unit.request.messages)
            for secret in (inst.preference, inst.context_factor, *inst.checklist):
                assert secret not in sent
    assert [u.instance_id for u in BENCHMARK._infer_units(ctx)][:2] == ["03+chemistry_teacher|consistent",
                                                                       "03+chemistry_teacher|contrastive"]


def test_a_wrong_number_of_ratings_is_asked_again_once_in_the_same_conversation():
    instances = load_instances("sample", None, 1)
    key, truth = instances[0].instance_id, instances[0].checklist
    ctx = StageContext(job("full"), instances)
    ctx.results = {
        "infer": table_of([row("infer", key, parsed={"preference": "P"})]),
        "decompose": table_of([row("decompose", key, "fake", {"checklist": ["a?", "b?"]})]),
        "match": table_of([row("match", key, "fake|precision", {"scores": [1.0]}, text="ONE RATING"),
                           row("match", key, "fake|recall", {"scores": [1.0] * len(truth)})]),
    }
    units = BENCHMARK._rematch_units(ctx)
    assert [u.item for u in units] == ["fake|precision"]
    messages = units[0].request.messages
    assert messages[0] == match_messages(["a?", "b?"], instances[0].preference)[0]
    assert messages[1] == {"role": "assistant", "content": "ONE RATING"}
    assert "rated 1 entries, but the checklist has 2" in messages[2]["content"]
    assert units[0].request.json_schema == match_schema(2)
    assert [u.item for u in BENCHMARK._match_units(ctx)] == ["fake|precision", "fake|recall"]


def test_summary_log_leaves_an_overflowed_summary_empty_and_waits_for_unanswered_ones():
    instances = load_instances("sample", None, 2)
    first, second = (i.instance_id for i in instances)
    rows = [row("summarize", iid, f"session{k}", {"summary": f"S{k}"}) for iid in (first, second) for k in range(7)]
    rows += [row("summarize", first, "session7", status="failed", cause="context_overflow"),
             row("summarize", second, "session7", status="failed", cause="timeout")]
    ctx = StageContext(job("summary", summarize=True), instances)
    ctx.results = {"summarize": table_of(rows)}
    units = BENCHMARK._infer_units(ctx)
    assert [u.instance_id for u in units] == [first]
    sent = units[0].request.messages[0]["content"]
    assert "### Conversation 7\n\nS6\n\n### Conversation 8\n\n\n" in sent


# -- loader ------------------------------------------------------------------------------------------
def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loader_reads_good_rows_in_every_format(tmp_path):
    instances = load_instances("sample", None, None)
    assert [i.instance_id for i in instances][3:] == ["17+bakery_owner|consistent", "17+bakery_owner|contrastive",
                                                     "17+bakery_owner|changing"]
    assert len(load_instances("sample", None, 2)) == 2
    pq.write_table(pa.Table.from_pylist(SAMPLE_ROWS), tmp_path / "cupid.parquet")
    (tmp_path / "cupid.json").write_text(json.dumps(SAMPLE_ROWS))
    for name in ("cupid.parquet", "cupid.json"):
        assert load_instances("hub", str(tmp_path / name), None) == instances


@pytest.mark.parametrize("change, field", [
    (lambda r: r["prior_interactions"].pop(), "prior_interactions"),
    (lambda r: r["prior_interactions"][3]["dialogue"][1].update(role="system"),
     "prior_interactions[3].dialogue[1].role"),
    (lambda r: r["prior_interactions"][2].pop("context_factor"), "prior_interactions[2].context_factor"),
    (lambda r: r.update(current_checklist=[]), "current_checklist"),
    (lambda r: r.update(current_checklist="a?"), "current_checklist"),
    (lambda r: r.update(instance_type="stable"), "instance_type"),
    (lambda r: r.update(current_request=""), "current_request"),
])
def test_loader_rejects_malformed_row_naming_file_row_field(tmp_path, change, field):
    rows = json.loads(json.dumps(SAMPLE_ROWS))
    change(rows[1])
    path = write_rows(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_instances("hub", str(path), None)
    message = str(info.value)
    assert str(path) in message and "row 2" in message and f"'{field}'" in message


def test_loader_lists_every_bad_row_at_once_up_to_twenty(tmp_path):
    rows = json.loads(json.dumps(SAMPLE_ROWS))
    rows[1]["current_request"] = ""
    rows[4]["prior_interactions"].pop()
    with pytest.raises(DataError) as info:
        load_instances("hub", str(write_rows(tmp_path / "two.jsonl", rows)), None)
    message = str(info.value)
    assert "2 bad row(s)" in message and "row 2: field 'current_request'" in message
    assert "row 5: field 'prior_interactions'" in message
    many = [dict(SAMPLE_ROWS[0], persona_id=f"p{i}", current_request="") for i in range(23)]
    with pytest.raises(DataError) as info:
        load_instances("hub", str(write_rows(tmp_path / "many.jsonl", many)), None)
    message = str(info.value)
    assert "23 bad row(s)" in message and "row 20:" in message and "row 21:" not in message
    assert "... and 3 more bad row(s)" in message


def test_unusual_checklist_lengths_are_kept_with_one_warning(tmp_path, capsys):
    rows = json.loads(json.dumps(SAMPLE_ROWS))
    rows[0]["current_checklist"] = ["only one?"]
    rows[2]["current_checklist"] = [f"q{k}?" for k in range(5)]
    path = write_rows(tmp_path / "odd.jsonl", rows)
    for _ in range(3):  # loaded once per condition: warned once
        instances = load_instances("hub", str(path), None)
    assert [len(i.checklist) for i in instances][:3] == [1, len(SAMPLE_ROWS[1]["current_checklist"]), 5]
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "2 row(s)" in err and "row 1 (1)" in err and "row 3 (5)" in err


def test_oracle_matching_ignores_whitespace_and_case_and_a_row_without_one_is_an_error(tmp_path):
    rows = json.loads(json.dumps(SAMPLE_ROWS))
    raw = rows[0]
    raw["current_context_factor"] = "  " + raw["current_context_factor"].upper() + " "
    raw["current_contextual_preference"] = raw["current_contextual_preference"].replace(" ", "  ") + "\n"
    instances = load_instances("hub", str(write_rows(tmp_path / "spaces.jsonl", rows)), None)
    assert oracle_indices(instances[0]) == (1, 6)
    rows[3]["current_contextual_preference"] = "A preference no earlier session holds."
    with pytest.raises(DataError, match=r"row 4: no prior session has the current context factor and preference"):
        load_instances("hub", str(write_rows(tmp_path / "none.jsonl", rows)), None)


def test_loader_rejects_duplicates_and_bad_json(tmp_path):
    with pytest.raises(DataError, match=r"row 2: duplicate .*03\+chemistry_teacher\|consistent"):
        load_instances("hub", str(write_rows(tmp_path / "dup.jsonl", [SAMPLE_ROWS[0]] * 2)), None)
    (tmp_path / "broken.jsonl").write_text(json.dumps(SAMPLE_ROWS[0]) + "\n{not json\n")
    with pytest.raises(DataError, match=r"broken.jsonl: row 2: not valid JSON"):
        load_instances("hub", str(tmp_path / "broken.jsonl"), None)
    with pytest.raises(DataError, match="not found"):
        load_instances("hub", str(tmp_path / "missing.parquet"), None)


def test_hub_id_without_datasets_library_is_a_clear_data_error():
    try:
        import datasets  # noqa: F401
        pytest.skip("the datasets library is installed: this checks the message given without it")
    except ImportError:
        pass
    with pytest.raises(DataError, match=r"benchmark.data.path=kixlab/CUPID: the `datasets` library is not installed"):
        load_instances("hub", "kixlab/CUPID", None)


# -- end to end: every CUPID condition through the real CLI and the fake provider -------------------
CONDITIONS = ("full", "oracle", "oracle_preference", "summary")
INFER_PARAMS = {"max_tokens": 1024, "temperature": 0.0}  # the stage's params over the fake's max_tokens
# The fake answers by echoing lines of the prompt, so with the default prompts its inferences hold no
# marked preference section: every inference is a model failure (scored 0), which the test asserts.
# The prompt-override test (test_cupid_prompts.py) walks the decompose and match paths.
SEED = 25


def shard_rows(run_dir: Path) -> list[dict]:
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


def expected_log(raw: dict, condition: str, rows: list[dict]) -> str:
    """The log the model must have been shown, rebuilt here from the raw row and stored summaries."""
    instances = {i.instance_id: i for i in load_instances("sample", None, None)}
    key = f"{raw['persona_id']}|{raw['instance_type']}"
    sessions = raw["prior_interactions"]
    if condition == "summary":
        texts = {r["item"]: r["text"].strip() for r in rows if r["stage"] == "summarize" and r["instance_id"] == key}
        return render_log([texts[f"session{i}"] for i in range(8)])
    if condition == "oracle":
        sessions = [s for s in sessions if s["context_factor"] == raw["current_context_factor"]
                    and s["contextual_preference"] == raw["current_contextual_preference"]]
    index = {s.dialogue[0].content: s for s in instances[key].sessions}
    return render_log([render_session(index[s["dialogue"][0]["content"]]) for s in sessions])


def inference_outcome(text: str, raw: dict, paths: dict[str, int], settings: CupidSettings | None,
                      seed: int) -> tuple[float, int, float, int]:
    """(Σ rated inferred, k, Σ rated true, t) of one instance, from the fake's answer rule."""
    truth = raw["current_checklist"]
    try:
        preference = parse_preference(text)["preference"]
    except ParseError:
        paths["unparsable"] += 1
        return 0.0, 0, 0.0, len(truth)  # a model failure scores 0, as the reference does
    checklist = answer_json(DECOMPOSE_SCHEMA, list(decompose_messages(preference, settings)), seed)["checklist"]
    if not checklist:
        paths["empty"] += 1
        return 0.0, 0, 0.0, len(truth)
    true_pref = raw["current_contextual_preference"]
    precision = [COVER[x["coverage"]] for x in answer_json(
        match_schema(len(checklist)), list(match_messages(checklist, true_pref, settings)), seed)["results"]]
    recall = [COVER[x["coverage"]] for x in answer_json(
        match_schema(len(truth)), list(match_messages(truth, preference, settings)), seed)["results"]]
    assert (len(precision), len(recall)) == (len(checklist), len(truth))  # the schema fixes the count
    paths["matched"] += 1
    return sum(precision), len(checklist), sum(recall), len(truth)


def expected_metrics(run_dir: Path, condition: str, limit: int, paths: dict[str, int],
                     settings: CupidSettings | None = None, seed: int = SEED) -> dict[str, tuple[float, int, int]]:
    """P/R/F1/alignment from the stored subject texts and the fake's answer rule, with our own arithmetic."""
    rows = [r for r in shard_rows(run_dir) if r["condition"] == condition]
    subject = {(r["stage"], r["instance_id"], r["item"]): r for r in rows}
    sums: dict[str, list[tuple]] = {}   # slice -> [(hit_inf, n_inf, hit_true, n_true) per scored instance]
    scores: dict[str, list[float]] = {}
    for raw in SAMPLE_ROWS[:limit]:
        key = f"{raw['persona_id']}|{raw['instance_type']}"
        slices = ("", raw["instance_type"])
        if condition == "summary":
            inst = next(i for i in load_instances("sample", None, None) if i.instance_id == key)
            for i, session in enumerate(inst.sessions):
                _, messages = summarize_messages(session, settings)
                assert subject[("summarize", key, f"session{i}")]["text"] == answer_text(list(messages), seed)
        if condition != "oracle_preference":
            infer = subject[("infer", key, "")]
            system, messages = infer_messages(expected_log(raw, condition, rows), raw["current_request"], settings)
            request = ChatRequest(messages, system=system, params=INFER_PARAMS, seed=seed)
            assert infer["request_hash"] == request.prompt_hash("fake-model")
            text = answer_text(list(messages), seed)
            assert infer["text"] == text
            outcome = inference_outcome(text, raw, paths, settings, seed)
            for part in slices:
                sums.setdefault(part, []).append(outcome)
        response = answer_text([{"role": "user", "content": raw["current_request"]}], seed)
        assert subject[("generate", key, "")]["text"] == response
        _, messages = judge_prompt(raw["current_contextual_preference"], tuple(raw["current_checklist"]),
                                   raw["current_request"], response, settings)
        score = answer_json(JUDGE_SCHEMA, list(messages), seed)["score"]
        for part in slices:
            scores.setdefault(part, []).append(score)
    out = {}
    for part, outcomes in sums.items():
        suffix = f"[instance_type={part}]" if part else ""
        p, r, f, f_mean = per_instance_prf([(ht, hi, nt, ni) for hi, ni, ht, nt in outcomes])
        out["precision" + suffix] = (p, len(outcomes), 0)
        out["recall" + suffix] = (r, len(outcomes), 0)
        out["F1" + suffix] = (f, len(outcomes), 0)
        out["F1_instance_mean" + suffix] = (f_mean, len(outcomes), 0)
        hit_inf, n_inf, hit_true, n_true = (sum(o[i] for o in outcomes) for i in range(4))
        pooled = sum(o[1] > 0 for o in outcomes)
        out["precision_pooled" + suffix] = (hit_inf / n_inf if n_inf else math.nan, pooled, len(outcomes) - pooled)
        out["recall_pooled" + suffix] = (hit_true / n_true, len(outcomes), 0)
    for part, values in scores.items():
        suffix = f"[instance_type={part}]" if part else ""
        out["alignment" + suffix] = (sum(values) / len(values), len(values), 0)
    return out


def read_metrics(run_dir: Path) -> dict[tuple[str, str], tuple[float, int, int]]:
    with open(run_dir / "metrics.csv") as handle:
        return {(r["condition"], r["metric"]): (float(r["value"]), int(r["n"]), int(r["excluded"]))
                for r in csv.DictReader(handle) if r["model"] == "fake" and r["judge"] == "fake"}


def same(got: tuple[float, int, int], want: tuple[float, int, int]) -> bool:
    both_nan = math.isnan(got[0]) and math.isnan(want[0])
    return (both_nan or abs(got[0] - want[0]) < 1e-9) and got[1:] == want[1:]


@pytest.mark.e2e
def test_sweep_over_all_conditions_equals_independent_metrics(run_cli, fake_server, tmp_path):
    """(Its resume sends nothing, summaries included: test_golden_metrics, on every condition.)"""
    run_dir, limit = tmp_path / "run", 6
    args = ["-m", "benchmark=cupid", "condition=all", "model=fake", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={run_dir}", f"limit={limit}", f"run.seed={SEED}", "run.progress=false"]
    run_cli(*args)
    metrics = read_metrics(run_dir)
    assert {c for c, _ in metrics} == set(CONDITIONS)
    for condition in CONDITIONS:
        paths = {"unparsable": 0, "empty": 0, "matched": 0}
        expected = expected_metrics(run_dir, condition, limit, paths)
        for name, want in expected.items():
            assert same(metrics[(condition, name)], want), (condition, name, metrics[(condition, name)], want)
        if condition == "oracle_preference":
            assert not any(m.startswith(("precision", "F1")) for c, m in metrics if c == condition)
        else:
            assert paths["unparsable"] > 0, paths
            assert metrics[(condition, "parse_failures_infer")][:2] == (paths["unparsable"], limit)
            assert metrics[(condition, "failures_model[task=inference]")][:2] == (paths["unparsable"], limit)
            assert metrics[(condition, "matcher_length_mismatch")][0] == 0
    assert metrics[("summary", "parse_failures_summarize")][1] == limit * 8


def test_unit_scores_recompute_the_reported_means_per_persona():
    from prefray.benchmarks.cupid.units import persona_of

    table = fixture_table()
    units = BENCHMARK.unit_scores(table, SETTINGS).to_pylist()
    metrics = {r["metric"]: r["value"] for r in BENCHMARK.metrics(table, SETTINGS).to_pylist()}
    for name in ("precision", "recall", "F1_instance_mean", "precision_pooled", "recall_pooled", "alignment"):
        values = [u["value"] for u in units if u["metric"] == name]
        assert sum(values) / len(values) == pytest.approx(metrics[name])   # the reported mean / ratio
    # one unit per counted instance (A, B, D, E, H, J); the pooled ratios' hand-counted items: Σ k = 5, Σ t = 14
    assert [sum(u["metric"] == m for u in units) for m in ("precision", "recall", "F1_instance_mean")] == [6, 6, 6]
    # F1 is no mean of units: it is 2 P̄ R̄ / (P̄ + R̄) of the precision and recall units' means
    assert not any(u["metric"] == "F1" for u in units)
    assert sum(u["metric"] == "precision_pooled" for u in units) == 5
    assert sum(u["metric"] == "recall_pooled" for u in units) == 14
    personas = {persona_of(i) for i in table["instance_id"].to_pylist()}
    assert {u["cluster"] for u in units} <= personas and all("|" not in u["cluster"] for u in units)


def test_each_sweep_judge_reads_only_its_own_scorer_rows():
    """The fixture's scorer rows again under a second judge `k`, whose verdicts all failed to parse:
    judge `j` keeps the hand-checked numbers, and `k` counts every scorer call as a judge failure."""
    rows = fixture_table().to_pylist()
    second = [{**r, "judge": "k", "item": r["item"].replace("j", "k", 1), "meta_json": json.dumps({"judge": "k"}),
               "status": "failed", "cause": "parse_error", "parsed_json": None}
              for r in rows if r["role"] != "subject"]
    table = table_of(second + rows)
    got = {(r["judge"], r["metric"]): (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(table, SETTINGS).to_pylist()}
    alone = {("j", r["metric"]): (r["value"], r["n"], r["excluded"])
             for r in BENCHMARK.metrics(fixture_table(), SETTINGS).to_pylist()}
    assert {k for k in got if k[0] == "j"} == set(alone)
    assert all(same(got[k], alone[k]) for k in alone)
    # k: the decomposer failed on every instance whose inference was read (A-C, F, H-K), the judge on A-C
    assert got[("k", "failures_judge[task=inference]")][:2] == (8.0, 11)
    assert got[("k", "precision")] == (pytest.approx(0.0), 2, 9)   # D and E: model failures score 0
    assert got[("k", "alignment")] == (0.0, 1, 4)                  # only D's overflow scores (0)
    units = BENCHMARK.unit_scores(table, SETTINGS).to_pylist()
    assert [u for u in units if u["judge"] == "j"] == BENCHMARK.unit_scores(fixture_table(), SETTINGS).to_pylist()
    assert {u["metric"] for u in units if u["judge"] == "k"} == {"precision", "recall", "F1_instance_mean",
                                                                  "recall_pooled", "alignment"}
