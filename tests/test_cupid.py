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
from prefray.benchmarks.cupid.data import SAMPLE_PATH, load_instances
from prefray.benchmarks.cupid.scoring import (
    DECOMPOSE_SCHEMA, JUDGE_SCHEMA, MATCH_SCHEMA, decompose_messages, judge_prompt, match_messages,
    parse_checklist, parse_match, parse_preference, parse_score,
)
from prefray.engine.benchmark import DataError, Job, ParseError, StageContext
from prefray.engine.store import SHARD_SCHEMA
from prefray.engine.types import ChatRequest, ModelSpec
from prefray.fakellm.answers import answer_json, answer_text

SAMPLE_ROWS = [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines() if line.strip()]
COVER = {"fully covered": 1.0, "partially covered": 0.5, "not covered": 0.0}


# -- metrics on a hand-computed fixture -----------------------------------------------------------
def row(stage: str, instance: str, item: str = "", parsed=None, status: str = "ok", meta=None, **extra) -> dict:
    role = {"decompose": "decomposer", "match": "matcher", "judge": "judge"}.get(stage, "subject")
    return {"unit_id": f"{stage}/{instance}/{item}", "attempt": 1, "benchmark": "cupid", "model": "m",
            "condition": "full", "stage": stage, "role": role, "judge": "" if role == "subject" else "j",
            "instance_id": instance, "item": item, "sample": 0, "meta_json": json.dumps(meta or {}),
            "status": status, "cause": "parse_error" if status == "failed" else "",
            "parsed_json": None if parsed is None else json.dumps(parsed), "text": "", **extra}


def fixture_table() -> pa.Table:
    a, b, c, d = "p1|consistent", "p1|contrastive", "p1|changing", "p2|consistent"
    sub = lambda n: {"n_true": n}  # noqa: E731
    j = {"judge": "j"}
    rows = [
        row("infer", a, parsed={"preference": "x"}, meta=sub(3)),
        row("decompose", a, "j", {"checklist": ["q1", "q2"]}, meta=j),
        row("match", a, "j|precision", {"scores": [1.0, 0.5]}, meta=j),
        row("match", a, "j|recall", {"scores": [1.0, 0.0, 0.5]}, meta=j),
        row("infer", b, parsed={"preference": "y"}, meta=sub(2)),
        row("decompose", b, "j", {"checklist": []}, meta=j),           # empty: zero matches, no call
        row("infer", c, parsed={"preference": "z"}, meta=sub(4)),
        row("decompose", c, "j", {"checklist": ["q1", "q2", "q3"]}, meta=j),
        row("match", c, "j|precision", {"scores": [0.5]}, meta=j),                     # too short
        row("match", c, "j|recall", {"scores": [1.0, 1.0, 1.0, 1.0, 1.0]}, meta=j),     # too long
        row("infer", d, status="failed", meta=sub(2)),                  # unparsable inference
        row("generate", a, meta=sub(3)), row("judge", a, "j", {"score": 8.5}, meta=j),
        row("generate", b, meta=sub(2)), row("judge", b, "j", {"score": 7.0}, meta=j),
        row("generate", c, meta=sub(4)), row("judge", c, "j", status="failed", meta=j),
    ]
    return pa.Table.from_pylist([{k: r.get(k) for k in SHARD_SCHEMA.names} for r in rows], schema=SHARD_SCHEMA)


def test_metrics_by_hand():
    table = BENCHMARK.metrics(fixture_table(), {}).to_pylist()
    got = {r["metric"]: (r["value"], r["n"], r["excluded"]) for r in table}
    assert {r["judge"] for r in table} == {"j"}
    # precision: A 1+0.5 of 2, B 0 of 0, C [0.5] padded to [0.5,0,0] -> 0.5 of 3 => 2.0/5 = 0.4
    # recall: A 1+0+0.5 of 3, B 0 of 2, C [1]*5 cut to [1]*4 -> 4 of 4 => 5.5/9; D excluded
    p, r = 2.0 / 5, 5.5 / 9
    assert got["precision"] == (pytest.approx(p), 3, 1)
    assert got["recall"] == (pytest.approx(r), 3, 1)
    assert got["F1"][0] == pytest.approx(2 * p * r / (p + r))   # = 0.4835…
    assert got["matcher_length_mismatch"][:2] == (1.0, 3)
    # consistent: A only (D excluded): P 1.5/2, R 1.5/3; contrastive: B scored with nothing inferred
    assert got["precision[instance_type=consistent]"] == (0.75, 1, 1)
    assert got["recall[instance_type=consistent]"] == (0.5, 1, 1)
    assert got["precision[instance_type=contrastive]"][:2] == (0.0, 1)
    assert got["F1[instance_type=contrastive]"][0] == 0.0
    # alignment: (8.5 + 7) / 2; C's judge answer unreadable -> excluded
    assert got["alignment"] == (7.75, 2, 1)
    assert got["alignment[instance_type=changing]"][1:] == (0, 1)
    assert math.isnan(got["alignment[instance_type=changing]"][0])
    assert got["parse_failures_infer"][:2] == (1.0, 4)
    assert got["parse_failures_judge"][:2] == (1.0, 3)


def test_failed_summary_excludes_its_instance_from_both_tasks():
    tasks = {"tasks": ["inference", "generation"], "n_true": 2}
    rows = [row("summarize", "p|consistent", f"session{i}", {"summary": "s"}, meta=tasks) for i in range(8)]
    rows.append(row("summarize", "p|changing", "session0", status="failed", meta=tasks))  # chain stops here
    rows += [row("infer", "p|consistent", parsed={"preference": "x"}, meta=tasks),
             row("decompose", "p|consistent", "j", {"checklist": []}, meta={"judge": "j"}),
             row("generate", "p|consistent", meta=tasks),
             row("judge", "p|consistent", "j", {"score": 4.0}, meta={"judge": "j"})]
    table = pa.Table.from_pylist([{k: r.get(k) for k in SHARD_SCHEMA.names} for r in rows], schema=SHARD_SCHEMA)
    got = {r["metric"]: (r["value"], r["n"], r["excluded"]) for r in BENCHMARK.metrics(table, {}).to_pylist()}
    # consistent: empty checklist -> P 0 (0 of 0 items), R 0 of 2; changing: never reached inference
    assert got["precision"] == (0.0, 1, 1) and got["recall"] == (0.0, 1, 1) and got["F1"] == (0.0, 1, 1)
    assert got["alignment"] == (4.0, 1, 1)
    assert got["parse_failures_summarize"] == (1.0, 9, 0)


# -- parsers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, score", [
    ("8.5", 8.5), ("7/10", 7.0), ("**8**", 8.0), ("Score: 9", 9.0), ("Score: 8.5/10", 8.5),
    ('{"analysis": "ok", "score": 6.5}', 6.5), ('```json\n{"analysis": "a", "score": "4"}\n```', 4.0),
    ("### Evaluation Label\n\nGood\n\n### Evaluation Score\n\n7", 7.0),
    ("Item 2 is met. Overall I'd give it 6/10.", 6.0),
])
def test_parse_score(text, score):
    assert parse_score(text) == {"score": score}


@pytest.mark.parametrize("text", ["", "The answer is fine.", "### Evaluation Score\n\nexcellent", "Score: 11", "0"])
def test_parse_score_missing_or_out_of_range(text):
    with pytest.raises(ParseError):
        parse_score(text)


@pytest.mark.parametrize("text", [
    "Reasoning here.\nPreference: Use numbered steps.",
    "**Preference:** Use numbered steps.",
    "### Analysis\nblah\n\n### Most Likely Preference\n\nUse numbered steps.",
    "- Preference - \"Use numbered steps.\"",
    "They want lists. Preference: something else. Preference: Use numbered steps.",  # inline: the last label
])
def test_parse_preference_variants(text):
    assert parse_preference(text) == {"preference": "Use numbered steps."}


def test_parse_preference_missing_section():
    for text in ("I think they like lists.", "Preference:", "### Most Likely Preference\n\n"):
        with pytest.raises(ParseError):
            parse_preference(text)


def test_checklist_and_match_parsers():
    five = '{"checklist": ["a?", " ", "b?", "c?", "d?", "e?"]}'  # blanks dropped, then cut to 4
    assert parse_checklist(five) == {"checklist": ["a?", "b?", "c?", "d?"]}
    assert parse_checklist('{"checklist": []}') == {"checklist": []}
    answer = '{"results": [{"coverage": "Fully Covered"}, {"label": "partially"}, {"coverage": "not covered"}]}'
    assert parse_match(answer) == {"scores": [1.0, 0.5, 0.0]}
    for bad in ("no json", '{"results": [{"coverage": "mostly"}]}', '{"checklist": "x"}'):
        with pytest.raises(ParseError):
            (parse_match if "results" in bad or bad == "no json" else parse_checklist)(bad)


# -- oracle selection and what reaches the model -----------------------------------------------------
def job(condition: str, **settings) -> Job:
    spec = ModelSpec(name="fake", provider="openai", model_id="fake-model")
    cond = {"name": condition, **settings}
    return Job("cupid", condition, spec, {"judge": spec}, {"data": {"source": "sample"}}, cond)


def test_oracle_sessions_are_the_same_context_and_preference():
    instances = load_instances("sample", None, None)
    expected = {"consistent": [1, 6], "contrastive": [1, 6], "changing": None}
    for inst, raw in zip(instances, SAMPLE_ROWS):
        want = [i for i, s in enumerate(raw["prior_interactions"])
                if s["context_factor"] == raw["current_context_factor"]
                and s["contextual_preference"] == raw["current_contextual_preference"]]
        assert expected[inst.instance_type] in (None, want)
        units = BENCHMARK._infer_units(StageContext(job("oracle", history="oracle"), [inst]))
        system = units[0].request.system
        shown = [i for i, s in enumerate(raw["prior_interactions"]) if s["dialogue"][0]["content"] in system]
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
    (lambda r: r.update(current_checklist=["a?"]), "current_checklist"),
    (lambda r: r["current_checklist"].extend(["x?", "y?", "z?"]), "current_checklist"),
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
# A seed whose deterministic fake answers walk every path: unparsable inferences, an empty inferred
# checklist, matcher answers of the right and of the wrong length (the test asserts each happens).
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


def expected_metrics(run_dir: Path, condition: str, limit: int,
                     paths: dict[str, int]) -> dict[str, tuple[float, int, int]]:
    """P/R/F1/alignment from the stored subject texts and the fake's answer rule, with our own arithmetic."""
    rows = [r for r in shard_rows(run_dir) if r["condition"] == condition]
    subject = {(r["stage"], r["instance_id"], r["item"]): r for r in rows}
    sums: dict[str, list[float]] = {}   # slice -> [hit_inf, n_inf, hit_true, n_true, scored, excluded]
    scores: dict[str, list[float]] = {}
    for raw in SAMPLE_ROWS[:limit]:
        key = f"{raw['persona_id']}|{raw['instance_type']}"
        slices = ("", raw["instance_type"])
        if condition == "summary":
            inst = next(i for i in load_instances("sample", None, None) if i.instance_id == key)
            for i, session in enumerate(inst.sessions):
                _, messages = summarize_messages(session)
                assert subject[("summarize", key, f"session{i}")]["text"] == answer_text(list(messages), SEED)
        if condition != "oracle_preference":
            infer = subject[("infer", key, "")]
            system, messages = infer_messages(expected_log(raw, condition, rows), raw["current_request"])
            request = ChatRequest(messages, system=system, params=INFER_PARAMS, seed=SEED)
            assert infer["request_hash"] == request.content_hash("fake-model")
            text = answer_text(list(messages), SEED)
            assert infer["text"] == text
            outcome = None
            if "Preference:" in text:
                preference = text.rsplit("Preference:", 1)[1].strip()
                checklist = answer_json(DECOMPOSE_SCHEMA, list(decompose_messages(preference)), SEED)["checklist"]
                truth = raw["current_checklist"]
                if checklist:
                    true_pref = raw["current_contextual_preference"]
                    precision = [COVER[x["coverage"]] for x in answer_json(
                        MATCH_SCHEMA, list(match_messages(checklist, true_pref)), SEED)["results"]]
                    recall = [COVER[x["coverage"]] for x in answer_json(
                        MATCH_SCHEMA, list(match_messages(truth, preference)), SEED)["results"]]
                    wrong = len(precision) != len(checklist) or len(recall) != len(truth)
                    paths["mismatch" if wrong else "matched"] += 1
                    outcome = (sum(precision[:len(checklist)]), len(checklist), sum(recall[:len(truth)]), len(truth))
                else:
                    paths["empty"] += 1
                    outcome = (0.0, 0, 0.0, len(truth))
            else:
                paths["unparsable"] += 1
            for part in slices:
                acc = sums.setdefault(part, [0.0, 0, 0.0, 0, 0, 0])
                if outcome is None:
                    acc[5] += 1
                else:
                    acc[:5] = [a + b for a, b in zip(acc[:5], (*outcome, 1))]
        response = answer_text([{"role": "user", "content": raw["current_request"]}], SEED)
        assert subject[("generate", key, "")]["text"] == response
        _, messages = judge_prompt(raw["current_contextual_preference"], tuple(raw["current_checklist"]),
                                   raw["current_request"], response)
        score = answer_json(JUDGE_SCHEMA, list(messages), SEED)["score"]
        for part in slices:
            scores.setdefault(part, []).append(score)
    out = {}
    for part, (hit_inf, n_inf, hit_true, n_true, scored, excluded) in sums.items():
        suffix = f"[instance_type={part}]" if part else ""
        p = (hit_inf / n_inf if n_inf else 0.0) if scored else math.nan
        r = (hit_true / n_true if n_true else 0.0) if scored else math.nan
        out["precision" + suffix] = (p, scored, excluded)
        out["recall" + suffix] = (r, scored, excluded)
        out["F1" + suffix] = ((2 * p * r / (p + r) if p + r else 0.0), scored, excluded)
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


def test_sweep_over_all_conditions_equals_independent_metrics_and_resumes(run_cli, fake_server, tmp_path):
    run_dir, limit = tmp_path / "run", 6
    args = ["-m", "benchmark=cupid", "condition=all", "model=fake", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={run_dir}", f"limit={limit}", f"run.seed={SEED}", "run.progress=false"]
    run_cli(*args)
    metrics = read_metrics(run_dir)
    assert {c for c, _ in metrics} == set(CONDITIONS)
    for condition in CONDITIONS:
        paths = {"unparsable": 0, "empty": 0, "matched": 0, "mismatch": 0}
        expected = expected_metrics(run_dir, condition, limit, paths)
        for name, want in expected.items():
            assert same(metrics[(condition, name)], want), (condition, name, metrics[(condition, name)], want)
        if condition == "oracle_preference":
            assert not any(m.startswith(("precision", "F1")) for c, m in metrics if c == condition)
        else:
            assert all(paths.values()), paths
            assert metrics[(condition, "parse_failures_infer")][:2] == (paths["unparsable"], limit)
            assert metrics[(condition, "matcher_length_mismatch")][0] == paths["mismatch"]
    assert metrics[("summary", "parse_failures_summarize")][1] == limit * 8

    first = fake_server.stats()
    assert first["requests"] > 0
    before = (run_dir / "metrics.csv").read_text()
    run_cli(*args)
    assert fake_server.stats()["requests"] == first["requests"]  # summaries included: nothing is re-sent
    assert (run_dir / "metrics.csv").read_text() == before
