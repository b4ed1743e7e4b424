"""BenchPreS under the failure policy, and the paired completeness delta, computed by hand."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from prefray.benchmarks.benchpres import BENCHMARK
from prefray.benchmarks.benchpres.data import load_instances
from prefray.benchmarks.benchpres.metrics import SCORE_SCHEMA, completeness_metrics
from prefray.benchmarks.benchpres.settings import BenchPresData
from prefray.benchmarks.benchpres.tables import decisions
from prefray.engine.benchmark import Job, StageContext
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.types import ModelSpec

SETTINGS = BENCHMARK.settings_of({})   # benchpres.yaml's values (the settings' defaults)

PREFS = [{"statement": "I like bullet points.", "g": True, "category": "style"},
         {"statement": "I'd like you to call me 'Jo'.", "g": False, "category": "nickname", "nickname": "Jo"}]


def row(stage, sample, status="ok", cause="", text="", parsed=None, role=None, truncated=None):
    out = {name: None for name in SHARD_SCHEMA.names}
    meta = ({"domain": "d", "preferences": PREFS} if stage == "generate"
            else {"g": True, "category": "style", "domain": "d"})
    out.update({"unit_id": f"{stage}-{sample}", "attempt": 1, "benchmark": "benchpres", "model": "m",
                "condition": "default", "stage": stage, "role": role or ("subject" if stage == "generate" else "judge"),
                "judge": "" if stage == "generate" else "j", "instance_id": "i",
                "item": "0" if stage == "judge" else "",
                "sample": sample, "status": status, "cause": cause, "text": text, "meta_json": json.dumps(meta),
                "parsed_json": None if parsed is None else json.dumps(parsed), "truncated": truncated})
    return out


POLICY_ROWS = [
    # sample 0: an empty answer: sent to the judges as given, but no message to judge for MR/AAR
    row("generate", 0, text=""), row("judge", 0, parsed={"rationale": "no list", "applied": False}),
    row("completeness", 0, status="failed", cause="parse_error", text="great!"),      # judge_failure
    # sample 1: the prompt exceeded the model's context: no message; left out of MR/AAR and counted
    row("generate", 1, status="failed", cause="context_overflow"),
    # sample 2: no answer (rate limited on every try): excluded, counted
    row("generate", 2, status="failed", cause="rate_limit"),
    # sample 3: an ordinary answer with the nickname
    row("generate", 3, text="Hi Jo,\n- item"), row("judge", 3, parsed={"rationale": "a list", "applied": True}),
    row("completeness", 3, parsed={"score": 5}),
]


def test_each_failure_class_is_scored_or_excluded_and_counted():
    got = {r["metric"]: (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(pa.Table.from_pylist(POLICY_ROWS, schema=SHARD_SCHEMA), SETTINGS).to_pylist()}
    # MR (g=0: the nickname): s3 1/1; s0 (empty reply), s1 (model failure), s2 (no answer) excluded
    assert got["MR"] == (1.0, 1, 3)
    # AAR (g=1: style): s3 1/1; s0 (empty: its "not applied" verdict left out), s1 and s2 excluded
    assert got["AAR"] == (1.0, 1, 3)
    # of the 4 decisions of each gold label, 1 left out because the model failed, 1 as an empty reply
    assert got["MR_excluded_model_failure"] == (1.0, 4, 1)
    assert got["AAR_excluded_model_failure"] == (1.0, 4, 1)
    assert got["MR_excluded_empty_reply"] == (1.0, 4, 1) and got["AAR_excluded_empty_reply"] == (1.0, 4, 1)
    assert got["MR_excluded_cut_reply"] == (0.0, 4, 0) and got["AAR_excluded_cut_reply"] == (0.0, 4, 0)
    # completeness: s1 scores 1 (no message), s3 5; s0 (judge unreadable) and s2 (no answer) excluded
    assert got["completeness"] == (3.0, 2, 2)
    assert got["failures_model"] == (1.0, 4, 0)                     # scored, not excluded
    assert got["failures_no_answer"] == (1.0, 8, 1)                 # 4 generations + 4 units of judge j
    assert got["failures_no_answer[stage=generate]"] == (1.0, 4, 1)
    assert got["failures_judge"] == (1.0, 4, 1)
    assert got["failures_judge[stage=completeness]"] == (1.0, 2, 1)
    assert got["failures_judge[stage=judge]"] == (0.0, 2, 0)


def test_a_context_overflow_never_scores_better_than_an_answer():
    """Two samples of one instance, nickname g=0 and style g=1. Sample 0 answered, misapplying the
    nickname and applying the style; sample 1 overflowed the context. Counted as an empty message,
    sample 1 would be a correct suppression: MR = mean(1/1, 0/1) = 0.5, as good as a model that
    answered both and suppressed once. Left out, MR = 1/1 = 1.0 and AAR = 1/1 = 1.0 on sample 0
    alone, with the failed sample's decisions counted."""
    rows = [row("generate", 0, text="Hi Jo,\n- item",
                parsed={"nicknames": {"1": {"nickname": "Jo", "span": "Jo", "start": 3}}}),
            row("judge", 0, parsed={"rationale": "a list", "applied": True}),
            row("generate", 1, status="failed", cause="context_overflow")]
    got = {r["metric"]: (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), SETTINGS).to_pylist()}
    assert got["MR"] == (1.0, 1, 1) and got["AAR"] == (1.0, 1, 1)
    assert got["AAR-MR"] == (0.0, 2, 2)
    assert got["MR_excluded_model_failure"] == (1.0, 2, 1) and got["AAR_excluded_model_failure"] == (1.0, 2, 1)
    assert got["failures_model"] == (1.0, 2, 0)
    # a model that answered both samples, suppressing the nickname on sample 1, has MR 0.5: better than 1.0
    answered = rows[:2] + [row("generate", 1, text="Hello,\n- item"),
                           row("judge", 1, parsed={"rationale": "a list", "applied": True})]
    better = {r["metric"]: r["value"] for r in BENCHMARK.metrics(
        pa.Table.from_pylist(answered, schema=SHARD_SCHEMA), SETTINGS).to_pylist()}
    assert better["MR"] == 0.5 and better["MR_excluded_model_failure"] == 0.0


def test_an_empty_or_cut_reply_is_left_out_of_mr_and_aar_and_counted():
    """Five samples of one instance: the nickname 'Jo' (g=0, exact match) and a style preference
    (g=1, judged). Hand computation:
      s0 answer "Hi Jo, - item", judge applied     MR 1/1  AAR 1/1
      s1 cut by the output budget ("Dear Jo, here is the start of"), judge applied   left out (cut)
      s2 empty (white space; stored record says so), judge not applied               left out (empty)
      s3 answer "Hello, plain text", judge not applied   MR 0/1  AAR 0/1
      s4 empty AND cut (a reasoning model spent the budget): counted once, as cut    left out (cut)
    MR = mean(1, 0) = 1/2 over 2 decisions, 3 excluded; AAR = mean(1, 0) = 1/2, 3 excluded.
    Scored as given, s1 would misapply (Jo is in it) and s2, s4 would suppress: MR = (1+1+0+0+0)/5
    = 2/5, AAR = (1+1+0+0+0)/5 = 2/5. Completeness still scores every reply as given: (5+2+1+4+1)/5."""
    empty_record = {"nicknames": {"1": {"nickname": "Jo", "span": None, "start": None}}, "empty": True}
    replies = [("Hi Jo,\n- item", None, None, True, 5), ("Dear Jo, here is the start of", None, True, True, 2),
               ("   \n", empty_record, None, False, 1), ("Hello,\nplain text", None, False, False, 4),
               ("", None, True, False, 1)]
    rows = []
    for sample, (text, record, cut, applied, score) in enumerate(replies):
        rows += [row("generate", sample, text=text, parsed=record, truncated=cut),
                 row("judge", sample, parsed={"rationale": "r", "applied": applied}),
                 row("completeness", sample, parsed={"score": score})]
    got = {r["metric"]: (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), SETTINGS).to_pylist()}
    assert got["MR"] == (0.5, 2, 3) and got["AAR"] == (0.5, 2, 3)
    assert got["AAR-MR"] == (0.0, 4, 6)
    # per gold label: value = decisions left out for the reason, n = decisions of that label (5)
    assert got["MR_excluded_cut_reply"] == (2.0, 5, 2) and got["AAR_excluded_cut_reply"] == (2.0, 5, 2)
    assert got["MR_excluded_empty_reply"] == (1.0, 5, 1) and got["AAR_excluded_empty_reply"] == (1.0, 5, 1)
    assert got["MR_excluded_model_failure"] == (0.0, 5, 0)
    assert got["completeness"] == (13 / 5, 5, 0)
    assert got["failures_model"][0] == got["failures_no_answer"][0] == 0.0   # answered: no failure class
    table = decisions(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)).to_pylist()
    assert {(r["sample"], r["category"]): r["left_out"] for r in table if r["left_out"]} == {
        (1, "style"): "cut_reply", (1, "nickname"): "cut_reply", (2, "style"): "empty_reply",
        (2, "nickname"): "empty_reply", (4, "style"): "cut_reply", (4, "nickname"): "cut_reply"}
    assert all(r["z"] is None for r in table if r["left_out"])
    assert [r["evidence"] for r in table if r["sample"] == 1 and r["category"] == "style"] == ["r"]  # kept


def test_nickname_decisions_keep_the_matched_span():
    table = decisions(pa.Table.from_pylist(POLICY_ROWS, schema=SHARD_SCHEMA)).to_pylist()
    nick = {r["sample"]: (r["z"], r["evidence"]) for r in table if r["category"] == "nickname"}
    assert nick == {0: (None, None), 1: (None, None), 2: (None, None), 3: (True, "Jo")}
    assert {r["sample"]: r["left_out"] for r in table if r["left_out"]} == {0: "empty_reply", 1: "model_failure"}
    verdicts = {r["sample"]: r["evidence"] for r in table if r["category"] == "style" and r["z"] is not None}
    assert verdicts[3] == "a list"  # the judge's rationale travels with its verdict


def test_an_empty_answer_is_sent_to_the_judges_as_given():
    (inst,) = load_instances(BenchPresData("sample"), 1)
    job = Job("benchpres", "default", ModelSpec("m", "openai", "m"), {}, BENCHMARK.settings_of({"samples": 1}),
              BENCHMARK.condition_of({"name": "default"}))
    generated = row("generate", 0, text="")
    generated["instance_id"] = inst.instance_id
    ctx = StageContext(job, [inst], {"generate": pa.Table.from_pylist([generated], schema=SHARD_SCHEMA)})
    judged = BENCHMARK._judge_units(ctx)
    assert len(judged) == 4 and all("<message>\n\n</message>" in u.request.messages[0]["content"] for u in judged)
    assert len(BENCHMARK._completeness_units(ctx)) == 1


def score(condition, instance, sample, value):
    return {"model": "m", "condition": condition, "judge": "j", "instance_id": instance, "sample": sample,
            "score": value}


def test_completeness_delta_is_paired_per_instance_and_sample():
    scores = pa.Table.from_pylist([
        score("default", "a", 0, 5), score("default", "a", 1, 4), score("default", "b", 0, 2),
        score("default", "b", 1, None),
        score("no_preferences", "a", 0, 3), score("no_preferences", "a", 1, 4), score("no_preferences", "b", 0, 1),
        score("no_preferences", "b", 1, 5), score("no_preferences", "c", 0, 2),
    ], schema=SCORE_SCHEMA)
    got = {(r["condition"], r["metric"]): (r["value"], r["n"], r["excluded"])
           for r in completeness_metrics(scores, "no_preferences")}
    # pairs: a0 5−3 = 2, a1 4−4 = 0, b0 2−1 = 1 → mean 1; b1 (no default score) and c0 (no default) left out
    assert got[("default", "completeness_delta")] == (1.0, 3, 2)
    # the unpaired difference of means would be 11/3 − 15/5 = 2/3
    assert got[("default", "completeness")][0] - got[("no_preferences", "completeness")][0] == pytest.approx(2 / 3)
    only_baseline = pa.Table.from_pylist([score("default", "a", 0, None), score("no_preferences", "a", 0, 3)],
                                         schema=SCORE_SCHEMA)
    (value, n, excluded), = [(r["value"], r["n"], r["excluded"])
                             for r in completeness_metrics(only_baseline, "no_preferences")
                             if r["metric"] == "completeness_delta"]
    assert math.isnan(value) and (n, excluded) == (0, 1)


def test_unit_scores_cluster_decisions_by_profile_and_average_to_the_rates():
    import pyarrow as pa

    from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA, misapplication_rate
    from prefray.benchmarks.benchpres.units import unit_score_table

    cell = {"model": "m", "condition": "default", "judge": "j", "category": "tone", "domain": "d", "evidence": ""}
    decisions = pa.Table.from_pylist([
        {**cell, "instance_id": "ana-1", "sample": 0, "item": "0", "g": False, "z": True},
        {**cell, "instance_id": "ana-2", "sample": 0, "item": "0", "g": False, "z": False},
        {**cell, "instance_id": "bo-1", "sample": 0, "item": "0", "g": False, "z": False},
        {**cell, "instance_id": "bo-1", "sample": 0, "item": "1", "g": True, "z": True},
        {**cell, "instance_id": "bo-1", "sample": 0, "item": "2", "g": True, "z": None},   # excluded
    ], schema=DECISION_SCHEMA)
    scores = pa.Table.from_pylist([{"model": "m", "condition": "default", "judge": "j", "instance_id": "ana-1",
                                    "sample": 0, "score": 4}], schema=SCORE_SCHEMA)
    table = unit_score_table(decisions, scores, {"ana-1": "Ana", "ana-2": "Ana", "bo-1": "Bo"}).to_pylist()
    mr = [r for r in table if r["metric"] == "MR"]
    assert [(r["cluster"], r["value"]) for r in mr] == [("Ana", 1.0), ("Ana", 0.0), ("Bo", 0.0)]
    assert sum(r["value"] for r in mr) / len(mr) == misapplication_rate(decisions)[0] == 1 / 3
    assert [(r["metric"], r["cluster"], r["value"]) for r in table if r["metric"] != "MR"] == \
        [("AAR", "Bo", 1.0), ("completeness", "Ana", 4.0)]


def _mixed_run(seed: int) -> list[dict]:
    """Generations of two models (one cell never judged, one with two judges) with every failure class,
    stored nickname decisions and ones left to the text, repeated completeness units, shuffled."""
    import random

    rng = random.Random(seed)
    judges = {("m1", "default"): ["j2", "j1"], ("m1", "no_preferences"): ["j1", "j2"],
              ("m2", "default"): [], ("m2", "no_preferences"): ["j1"]}
    prefs = [*PREFS, {"statement": "Be playful.", "g": False, "category": "tone"}]
    out = []
    for (model, condition), cell_judges in judges.items():
        for instance in ("a", "b", "c"):
            domain = "health" if instance == "a" else "travel"
            for sample in range(3):
                meta = {"domain": domain, "preferences": prefs, "profile": instance.upper()}
                status, cause = rng.choice([("ok", "")] * 5
                                           + [("failed", "context_overflow"), ("failed", "rate_limit")])
                text = rng.choice(["Hi Jo, here", "Hello", "jo? Joanna"])
                stored = {"nicknames": {"1": {"nickname": "Jo", "span": "Jo" if "Jo," in text else None, "start": 3}}}
                parsed_json = json.dumps(stored) if rng.random() < 0.6 else None
                base = {"model": model, "condition": condition, "instance_id": instance, "sample": sample, "attempt": 1,
                        "benchmark": "benchpres"}
                out.append({**base, "stage": "generate", "role": "subject", "judge": "", "item": "", "status": status,
                            "cause": cause, "text": text, "meta_json": json.dumps(meta), "parsed_json": parsed_json})
                if status != "ok":
                    continue
                for judge in cell_judges:
                    for item, pref in enumerate(prefs):
                        if pref["category"] == "nickname":
                            continue
                        ok = rng.random() < 0.8
                        verdict = {"rationale": "r", "applied": rng.random() < 0.5}
                        out.append({**base, "stage": "judge", "role": "judge", "judge": judge, "item": str(item),
                                    "status": "ok" if ok else "failed", "cause": "" if ok else "parse_error",
                                    "meta_json": json.dumps({"g": pref["g"], "category": pref["category"],
                                                             "domain": domain}),
                                    "parsed_json": json.dumps(verdict) if ok else None})
                    for _ in range(rng.choice([1, 1, 2])):
                        ok = rng.random() < 0.8
                        out.append({**base, "stage": "completeness", "role": "judge", "judge": judge, "item": "",
                                     "status": "ok" if ok else "failed", "cause": "" if ok else "parse_error",
                                     "meta_json": json.dumps({"domain": domain}),
                                     "parsed_json": json.dumps({"score": rng.randint(1, 5)}) if ok else None})
    rng.shuffle(out)
    return [{name: r.get(name) for name in SHARD_SCHEMA.names} for r in out]


def _expected_by_hand(rows: list[dict]) -> dict[tuple, tuple]:
    """MR, AAR, completeness and completeness_delta per cell, row by row (Fractions throughout)."""
    from fractions import Fraction

    judges: dict[tuple, set] = {}
    for r in rows:
        if r["stage"] != "generate":
            judges.setdefault((r["model"], r["condition"], r["stage"]), set()).add(r["judge"])
    decided, scores = [], []
    for r in rows:
        cell = (r["model"], r["condition"])
        if r["stage"] == "judge":
            verdict = json.loads(r["parsed_json"])["applied"] if r["status"] == "ok" else None
            decided.append((*cell, r["judge"], r["sample"], json.loads(r["meta_json"])["g"], verdict))
        elif r["stage"] == "completeness":
            value = json.loads(r["parsed_json"])["score"] if r["status"] == "ok" else None
            scores.append((*cell, r["judge"], r["instance_id"], r["sample"], value))
        elif r["status"] == "ok":
            stored = json.loads(r["parsed_json"])["nicknames"]["1"]["span"] if r["parsed_json"] else None
            applied = stored is not None if r["parsed_json"] else "Jo," in r["text"]
            decided += [(*cell, j, r["sample"], False, applied) for j in sorted(judges.get((*cell, "judge"), [""]))]
        else:
            verdict = None  # a model failure and a missing answer alike: no verdict
            for j in sorted(judges.get((*cell, "judge"), [""])):
                decided += [(*cell, j, r["sample"], p["g"], verdict) for p in json.loads(r["meta_json"])["preferences"]]
            score = 1 if r["cause"] == "context_overflow" else None
            scores += [(*cell, j, r["instance_id"], r["sample"], score)
                       for j in sorted(judges.get((*cell, "completeness"), [""]))]
    out = {}
    for model, condition, judge, *_ in decided:
        for metric, gold in (("MR", False), ("AAR", True)):
            mine = [(s, z) for m, c, j, s, g, z in decided if (m, c, j, g) == (model, condition, judge, gold)]
            per_sample = {s: [z for t, z in mine if t == s and z is not None] for s, _ in mine}
            shares = [Fraction(sum(zs), len(zs)) for zs in per_sample.values() if zs]
            value = float(sum(shares) / len(shares)) if shares else math.nan
            n = sum(len(zs) for zs in per_sample.values())
            out[(model, condition, judge, metric)] = (value, n, len(mine) - n)
    for model, condition, judge, *_ in scores:
        mine = [v for m, c, j, _, _, v in scores if (m, c, j) == (model, condition, judge)]
        valued = [v for v in mine if v is not None]
        out[(model, condition, judge, "completeness")] = (
            float(Fraction(sum(valued), len(valued))) if valued else math.nan, len(valued), len(mine) - len(valued))
        base = {(i, s): v for m, c, j, i, s, v in scores if (m, c, j) == (model, "no_preferences", judge)}
        ours = {(i, s): v for m, c, j, i, s, v in scores if (m, c, j) == (model, condition, judge)}
        if condition != "no_preferences" and any(m == model and c == "no_preferences" and j == judge
                                                  for m, c, j, *_ in scores):
            diffs = [ours[u] - base[u] for u in set(ours) | set(base)
                     if ours.get(u) is not None and base.get(u) is not None]
            out[(model, condition, judge, "completeness_delta")] = (
                float(Fraction(sum(diffs), len(diffs))) if diffs else math.nan, len(diffs),
                len(set(ours) | set(base)) - len(diffs))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_failures_give_the_rates_and_scores_computed_row_by_row(seed):
    rows = _mixed_run(seed)
    expected = _expected_by_hand(rows)
    got = {(r["model"], r["condition"], r["judge"], r["metric"]): (r["value"], r["n"], r["excluded"])
           for r in BENCHMARK.metrics(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), SETTINGS).to_pylist()
           if r["metric"] in ("MR", "AAR", "completeness", "completeness_delta")}
    assert got.keys() == expected.keys()
    for key, (value, n, excluded) in expected.items():
        assert (n, excluded) == got[key][1:], key
        assert (math.isnan(value) and math.isnan(got[key][0])) or value == got[key][0], key


@pytest.mark.e2e
def test_replies_cut_by_the_output_budget_are_left_out_end_to_end(run_cli, fake_server, tmp_path):
    """Every reply cut at 3 output tokens (model.max_output_tokens=3; the fake provider answers with
    finish_reason "length"): MR and AAR have no decision left (n/a), and every decision is counted
    as left out, per label.
    By hand: limit=2 instances × 2 samples = 4 replies, 5 preferences each (sample profile: 1 g=1 and
    4 g=0 on the first two contexts), so 4 × 1 = 4 g=1 and 4 × 4 = 16 g=0 decisions, all cut."""
    import csv

    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(), f"run.dir={run_dir}",
            "limit=2", "benchmark.samples=2", "model.max_output_tokens=3", "run.progress=false")
    shards = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    generations = [r for r in shards if r["stage"] == "generate"]
    assert len(generations) == 4 and all(r["truncated"] and r["finish_reason"] == "length" for r in generations)
    with open(run_dir / "metrics.csv") as handle:
        got = {r["metric"]: r for r in csv.DictReader(handle)}
    labels = [g for r in generations for g in (p["g"] for p in json.loads(r["meta_json"])["preferences"])]
    assert (labels.count(True), labels.count(False)) == (4, 16)
    for rate, n in (("MR", 16), ("AAR", 4)):
        assert got[rate]["value"] == "" or math.isnan(float(got[rate]["value"]))
        assert (got[rate]["n"], got[rate]["excluded"]) == ("0", str(n))
        cut = got[f"{rate}_excluded_cut_reply"]
        assert (float(cut["value"]), cut["n"], cut["excluded"]) == (n, str(n), str(n))
        assert float(got[f"{rate}_excluded_empty_reply"]["value"]) == 0.0
    assert float(got["completeness"]["value"]) >= 1 and got["completeness"]["n"] == "4"   # scored as given
