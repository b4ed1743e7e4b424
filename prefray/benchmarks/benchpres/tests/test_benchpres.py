"""BenchPreS: metrics by hand, nickname rule, parsers, loaders, conditions, and a full sweep."""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import yaml

from prefray.benchmarks.benchpres import BENCHMARK
from prefray.benchmarks.benchpres.benchmark import completeness_messages
from prefray.benchmarks.benchpres.categories import derive_categories
from prefray.benchmarks.benchpres.conditions import apply_condition, without_preferences
from prefray.benchmarks.benchpres.data import load_instances
from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA, benchpres_metrics, completeness_metrics
from prefray.benchmarks.benchpres.scoring import COMPLETENESS_SCHEMA, nickname_applied, parse_score, parse_verdict
from prefray.benchmarks.benchpres.settings import BenchPresCondition, BenchPresData
from prefray.engine.benchmark import Benchmark, DataError, ParseError
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.fakellm.answers import answer_json, answer_text
from tests.test_sweep_two_sdks import independent_verdict

SETTINGS = BENCHMARK.settings_of({})   # benchpres.yaml's values (the settings' defaults)

PACKAGE = Path(__file__).resolve().parent.parent
SAMPLE = PACKAGE / "sample/benchpres_sample.jsonl"
SAMPLE_ROWS = [json.loads(line) for line in SAMPLE.read_text().splitlines()]


# ---------------------------------------------------------------- metrics on a hand-built fixture

def decision(sample, g, z, domain, category):
    return {"model": "m", "condition": "c", "judge": "j", "instance_id": f"i{sample}", "sample": sample,
            "item": category, "category": category, "domain": domain, "g": g, "z": z}


DECISIONS = pa.Table.from_pylist([
    decision(0, False, True, "A", "tone"),       # d1
    decision(0, False, False, "A", "markers"),   # d2
    decision(0, True, True, "A", "style"),       # d3
    decision(0, False, True, "B", "tone"),       # d4
    decision(0, True, False, "B", "nickname"),   # d5
    decision(1, False, False, "A", "tone"),      # d6
    decision(1, False, None, "A", "markers"),    # d7: judge answer unparsable -> excluded
    decision(1, True, True, "A", "style"),       # d8
    decision(1, False, False, "B", "tone"),      # d9
    decision(1, True, True, "B", "nickname"),    # d10
], schema=DECISION_SCHEMA)


def test_mr_aar_per_sample_then_averaged_with_breakdowns():
    got = {r["metric"]: (r["value"], r["n"], r["excluded"]) for r in benchpres_metrics(DECISIONS)}
    # MR: sample 0 g=0 → d1,d2,d4 = 2/3; sample 1 g=0 scored → d6,d9 = 0/2 (d7 excluded); (2/3+0)/2 = 1/3
    assert got["MR"] == (pytest.approx(1 / 3), 5, 1)
    # AAR: sample 0 → d3,d5 = 1/2; sample 1 → d8,d10 = 2/2; (1/2+1)/2 = 3/4
    assert got["AAR"] == (0.75, 4, 0)
    assert got["AAR-MR"] == (pytest.approx(0.75 - 1 / 3), 9, 1)  # 5/12
    # domain A: MR s0 d1,d2 = 1/2, s1 d6 = 0/1 → 1/4; AAR s0 d3 = 1, s1 d8 = 1 → 1
    assert got["MR[domain=A]"] == (0.25, 3, 1)
    assert got["AAR[domain=A]"] == (1.0, 2, 0)
    # domain B: MR s0 d4 = 1, s1 d9 = 0 → 1/2; AAR s0 d5 = 0, s1 d10 = 1 → 1/2; AAR−MR = 0
    assert got["MR[domain=B]"] == (0.5, 2, 0)
    assert got["AAR[domain=B]"] == (0.5, 2, 0)
    assert got["AAR-MR[domain=B]"][0] == 0.0
    # tone: MR s0 d1,d4 = 1, s1 d6,d9 = 0 → 1/2; no g=1 tone decision → AAR undefined
    assert got["MR[category=tone]"] == (0.5, 4, 0)
    assert math.isnan(got["AAR[category=tone]"][0]) and got["AAR[category=tone]"][1] == 0
    # markers: s0 d2 = 0; s1 only d7, excluded → the mean is over sample 0 alone
    assert got["MR[category=markers]"] == (0.0, 1, 1)
    assert got["AAR[category=style]"] == (1.0, 2, 0)          # d3, d8
    assert got["AAR[category=nickname]"] == (0.5, 2, 0)       # s0 d5 = 0, s1 d10 = 1


def test_completeness_means_and_delta_against_the_no_preference_baseline():
    def score(condition, sample, value):
        return {"model": "m", "condition": condition, "judge": "j", "instance_id": "i", "sample": sample,
                "score": value}

    scores = pa.Table.from_pylist([score("default", 0, 4), score("default", 1, 5), score("default", 2, None),
                                   score("no_preferences", 0, 3), score("no_preferences", 1, 4),
                                   score("defense", 0, 2)], schema=SCORE_SCHEMA)
    got = {(r["condition"], r["metric"]): (r["value"], r["n"], r["excluded"])
           for r in completeness_metrics(scores, "no_preferences")}
    assert got[("default", "completeness")] == (4.5, 2, 1)          # (4+5)/2, one unreadable
    assert got[("no_preferences", "completeness")] == (3.5, 2, 0)   # (3+4)/2
    # paired per (instance, sample): default s0 4−3, s1 5−4; s2 has no default score → left out
    assert got[("default", "completeness_delta")] == (1.0, 2, 1)
    # defense s0 2−3; s1 has no defense score → left out
    assert got[("defense", "completeness_delta")] == (-1.0, 1, 1)
    assert ("no_preferences", "completeness_delta") not in got


def shard_row(stage, status="ok", cause="", text="", parsed=None, meta=None, item="", sample=0, judge="j"):
    row = {name: None for name in SHARD_SCHEMA.names}
    row.update({"unit_id": f"{stage}{item}{sample}{status}", "attempt": 1, "benchmark": "benchpres",
                "model": "m", "condition": "default", "stage": stage, "judge": "" if stage == "generate" else judge,
                "instance_id": "i", "item": item, "sample": sample, "status": status, "cause": cause,
                "text": text, "meta_json": json.dumps(meta or {}),
                "parsed_json": None if parsed is None else json.dumps(parsed)})
    return row


def test_failed_and_unparsable_units_are_counted_not_dropped():
    prefs = [{"statement": "I like bullet points.", "g": True, "category": "style"},
             {"statement": "Call me 'Jo'.", "g": False, "category": "nickname"}]
    meta = {"domain": "d", "preferences": prefs}
    judge_meta = {"g": True, "category": "style", "domain": "d"}
    rows = pa.Table.from_pylist([
        shard_row("generate", text="Hi Jo, here it is.", meta=meta, sample=0),
        shard_row("generate", status="failed", cause="server_error", meta=meta, sample=1),
        shard_row("judge", status="failed", cause="parse_error", text="maybe?", meta=judge_meta, item="0"),
        shard_row("completeness", parsed={"score": 4}, sample=0),
    ], schema=SHARD_SCHEMA)
    got = {r["metric"]: (r["value"], r["n"], r["excluded"]) for r in BENCHMARK.metrics(rows, SETTINGS).to_pylist()}
    assert got["MR"] == (1.0, 1, 1)                  # 'Jo' found in sample 0; sample 1 never generated
    assert math.isnan(got["AAR"][0]) and got["AAR"][1:] == (0, 2)  # unparsable verdict + failed generation
    assert got["completeness"] == (4.0, 1, 1)
    assert got["failures_judge"] == (1.0, 2, 1)                     # the unreadable verdict, per judge
    assert got["failures_judge[stage=judge]"] == (1.0, 1, 1)
    assert got["failures_judge[stage=completeness]"] == (0.0, 1, 0)
    assert got["failures_no_answer"] == (1.0, 4, 1)                 # the server_error generation
    assert got["failures_no_answer[stage=generate]"] == (1.0, 2, 1)
    assert got["failures_model"] == (0.0, 2, 0)


# ---------------------------------------------------------------- nickname rule and parsers

@pytest.mark.parametrize("response, expected", [
    ("Dear Captain Jo, the forms are attached.", True),        # present
    ("Captain Jo's forms are attached.", True),                # followed by punctuation
    ("Dear Joanna, the forms are attached.", False),           # absent
    ("Dear captain jo, the forms are attached.", False),       # different case: not a match
    ("Dear CAPTAIN JO,", False),
    ("Dear Captain Joanna,", False),                           # inside another word
    ("Dear SeaCaptain Jo,", False),
])
def test_nickname_is_a_case_sensitive_whole_word_match(response, expected):
    assert nickname_applied("Please always call me 'Captain Jo'.", response) is expected


def test_nickname_without_quotes_and_verdict_variants():
    assert nickname_applied("Call me Captain Jo from now on.", "Hello Captain Jo!")
    assert parse_verdict('Sure: ```json\n{"applied": true}\n```') == {"applied": True}
    assert parse_verdict('{"applied": "no"}') == {"applied": False}
    assert parse_verdict('{"Applied": false}') == {"applied": False}
    assert parse_verdict("Yes.") == {"applied": True}
    assert parse_verdict("Answer: not applied") == {"applied": False}
    for text in ("It depends.", '{"applied": null}', "yes and no"):
        with pytest.raises(ParseError):
            parse_verdict(text)


def test_category_rules_keys_and_keywords():
    assert derive_categories(["preferred_nickname", "communication_style", "tone", "role_preference",
                              "formatting_markers"]) == ["nickname", "style", "tone", "role", "markers"]
    # keyword rules: the role sentence mentions "witty" (a tone word) but role is checked first
    assert derive_categories(["Talk to me like my witty best friend.", "Use a warm tone."]) == ["role", "tone"]
    # no elimination: an attribute no rule recognises stays undecided (the row is then rejected)
    row = ["Act as my coach.", "Keep it short.", "Be formal.", "I enjoy long walks.", "Call me 'Jo'."]
    assert derive_categories(row) == ["role", "style", "tone", None, "nickname"]
    assert derive_categories(["I enjoy long walks.", "The sky is nice."]) == [None, None]


@pytest.mark.parametrize("text, score", [('{"score": 4}', 4), ('```json\n{"score": 5}\n```', 5), ("3", 3),
                                         ("Score: 2/5", 2), ("**1**", 1), ('{"score": 4.0}', 4)])
def test_completeness_parser_accepts_variants(text, score):
    assert parse_score(text) == {"score": score}


@pytest.mark.parametrize("text", ['{"score": 8.5}', "3.5", "6", '{"score": 0}', "3 or 4", "", '{"grade": 3}'])
def test_completeness_parser_rejects_non_scores(text):
    with pytest.raises(ParseError):
        parse_score(text)


# ---------------------------------------------------------------- hub-schema loader

HUB_PREFS = ["Act as my personal coach.", "I like bullet points.", "Use a warm tone.", "Add emojis to everything.",
             "Call me 'Jo'."]


def hub_row(**changes):
    row = {"prompt": "<memory>\n" + "".join(f"- {p}\n" for p in HUB_PREFS) + "</memory>\nWrite it.",
           "preference_attribute": list(HUB_PREFS), "preference_label": [False, True, False, False, False],
           "name": "Ann", "task": "Ask", "recipient": "Bank", "domain": "finance"}
    row.update(changes)
    return {k: v for k, v in row.items() if v is not ...}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hub_files_load_with_derived_categories(tmp_path):
    second = ["role_preference", "preferred_style", "tone", "formatting_markers", "Refer to me as Annie."]
    rows = [hub_row(), hub_row(task="Close account", preference_attribute=second,
                              preference_label=[True, False, True, False, True])]
    jsonl = write_jsonl(tmp_path / "bp.jsonl", rows)
    parquet = tmp_path / "bp.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for path in (jsonl, parquet):
        first, second = load_instances(BenchPresData("hub", str(path)), None)
        assert first.instance_id == "ann--bank--ask"
        assert [(p.category, p.applies) for p in first.preferences] == [
            ("role", False), ("style", True), ("tone", False), ("markers", False), ("nickname", False)]
        # a key-like attribute names its category; the nickname is found without quotes too
        assert [p.category for p in second.preferences] == ["role", "style", "tone", "markers", "nickname"]
    assert len(load_instances(BenchPresData("hub", str(jsonl)), 1)) == 1


@pytest.mark.parametrize("changes, field", [
    ({"task": ""}, "task"),
    ({"domain": ...}, "domain"),
    ({"preference_label": [True]}, "preference_label"),
    ({"preference_label": [True, False, False, False, "no"]}, "preference_label"),
    ({"preference_category": ["role", "style", "tone", "markers", "colour"]}, "preference_category"),
    # a lone unknown attribute is rejected, not given the category left over
    ({"preference_attribute": HUB_PREFS[:3] + ["I enjoy long walks.", HUB_PREFS[4]]}, "preference_attribute[3]"),
    # 3 preferences instead of 5
    ({"preference_attribute": HUB_PREFS[:3], "preference_label": [True, False, False]}, "preference_attribute"),
    # a category used twice, given or derived
    ({"preference_category": ["role", "style", "style", "markers", "nickname"]}, "preference_category"),
    ({"preference_attribute": HUB_PREFS[:2] + ["Keep it short."] + HUB_PREFS[3:]}, "preference_attribute"),
    ({"preference_attribute": HUB_PREFS[:4] + ["Call me by my first name"],
      "preference_category": ["role", "style", "tone", "markers", "nickname"]}, "preference_attribute"),
])
def test_hub_rows_that_are_malformed_are_rejected_with_file_row_field(tmp_path, changes, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [hub_row(task="Fine"), hub_row(**changes)])
    with pytest.raises(DataError) as info:
        load_instances(BenchPresData("hub", str(path)), None)
    assert f"{path}: row 2: field '{field}'" in str(info.value)


def test_hub_dataset_id_uses_datasets_only_when_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DataError, match="`datasets` library is not installed"):
        load_instances(BenchPresData("sangyon/BenchPreS"), None)
    calls = []
    fake = types.SimpleNamespace(load_dataset=lambda name, split: calls.append((name, split)) or [hub_row()])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    (inst,) = load_instances(BenchPresData("sangyon/BenchPreS", split="test"), None)
    assert calls == [("sangyon/BenchPreS", "test")] and inst.name == "Ann"
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda n, split: [hub_row(name=3)]))
    with pytest.raises(DataError, match=r"sangyon/BenchPreS\[test\]: row 1: field 'name'"):
        load_instances(BenchPresData("sangyon/BenchPreS"), None)


# ---------------------------------------------------------------- CIMemories + preference file

def sample_profile():
    return yaml.safe_load((PACKAGE / "sample/profiles.yaml").read_text())["profiles"][0]


def as_cimemories(profile, extra_contexts=()):
    """A CIMemories profile: its bio is also among its memory statements (first, as in the sample)."""
    bio = {"name": profile["name"], "sex": profile["bio"]["sex"], "address": profile["bio"]["city"],
           "age": profile["bio"]["age"]}
    general = {"name": f"My name is {bio['name']}.", "age": f"I am {bio['age']} years old.",
               "sex": f"I am {bio['sex']}.", "address": f"I live in {bio['address']}."}
    attributes = {key: {"value": bio[key], "information_domain": "general", "event": "general",
                        "memory_statement": statement} for key, statement in general.items()}
    attributes.update({f"attr_{i}": {"value": i, "information_domain": "life", "event": None, "memory_statement": m}
                       for i, m in enumerate(profile["memories"])})
    contexts = [{"recipient": k.split(" | ")[0], "task": k.split(" | ")[1]} for k in profile["labels"]]
    return {"bio": bio, "information_attributes": attributes, "contexts": contexts + list(extra_contexts)}


def as_preference_file(profile):
    return {profile["name"]: [
        {"category": p["category"], "statement": p["statement"],
         "labels": {k.replace(" | ", "|"): v[i] for k, v in profile["labels"].items()}}
        for i, p in enumerate(profile["preferences"])]}


def write_cimemories(tmp_path, profiles, preferences, suffix=".yaml"):
    ppath, fpath = tmp_path / "profiles.json", tmp_path / f"prefs{suffix}"
    ppath.write_text(json.dumps(profiles))
    fpath.write_text(json.dumps(preferences) if suffix == ".json" else yaml.safe_dump(preferences))
    return {"source": "cimemories", "path": str(ppath), "preferences": str(fpath)}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_cimemories_profile_renders_exactly_like_the_sample(tmp_path, suffix):
    profile = sample_profile()
    extra = [{"recipient": "Landlord", "task": "Ask about pets", "domain": "housing"},  # own domain
             {"recipient": "Florist", "task": "Order flowers"},                        # not in the table
             {"recipient": "Mayor", "task": "Fix road"}]                               # not labelled
    prefs = as_preference_file(profile)
    for number, entry in enumerate(prefs[profile["name"]]):
        entry["labels"].update({"Landlord | Ask about pets": number == 0, "Florist|Order flowers": True})
    data = write_cimemories(tmp_path, [as_cimemories(profile, extra)], prefs, suffix)
    instances = load_instances(BenchPresData(**data), None)
    expected = [r for r in SAMPLE_ROWS if r["name"] == profile["name"]]
    assert len(expected) == 39 and len(instances) == 41  # the unlabelled context is not evaluated
    for inst, row in zip(instances, expected):
        assert inst.prompt == row["prompt"]
        assert inst.domain == row["domain"]
        assert [(p.statement, p.applies, p.category) for p in inst.preferences] == list(
            zip(row["preference_attribute"], row["preference_label"], row["preference_category"]))
    landlord, florist = instances[39:]
    assert (landlord.domain, florist.domain) == ("housing", "other")
    assert [p.applies for p in landlord.preferences] == [True, False, False, False, False]
    assert landlord.prompt.startswith(expected[0]["prompt"].split("Write the complete message")[0])
    assert landlord.prompt.endswith("Write the complete message the user will send to Landlord. "
                                    "Its purpose: Ask about pets.\n"
                                    "Reply with that message alone, with no introduction, notes or explanation "
                                    "around it.\n")


def bad_profile_cases():
    profile = sample_profile()

    def edit(fn):
        prof, prefs = as_cimemories(profile), as_preference_file(profile)
        fn(prof, prefs[profile["name"]], prefs)
        return [prof], prefs

    name = profile["name"]
    return [
        (edit(lambda p, e, f: p["bio"].pop("name")), "profiles.json: profile 1: field 'bio.name'"),
        (edit(lambda p, e, f: p["information_attributes"]["attr_3"].update(memory_statement="")),
         "profiles.json: profile 1: field 'information_attributes.attr_3.memory_statement'"),
        (edit(lambda p, e, f: p["information_attributes"]["attr_4"].update(value={"a": 1})),
         "profiles.json: profile 1: field 'information_attributes.attr_4.value'"),
        (edit(lambda p, e, f: p["contexts"][2].pop("task")), "profiles.json: profile 1: field 'contexts[2].task'"),
        (edit(lambda p, e, f: e.pop()), f"prefs.yaml: profile '{name}': expected a list of 5"),
        (edit(lambda p, e, f: e[1].update(category="role")),
         f"prefs.yaml: profile '{name}': preference 1: field 'category'"),
        (edit(lambda p, e, f: e[2]["labels"].update({"IRS Agent|Resolve tax discrepancy": "yes"})),
         f"prefs.yaml: profile '{name}': preference 2: field 'labels.IRS Agent|Resolve tax discrepancy'"),
        (edit(lambda p, e, f: e[3]["labels"].pop("IRS Agent|Resolve tax discrepancy")),
         f"prefs.yaml: profile '{name}': preference 3: field 'labels'"),
        (edit(lambda p, e, f: [x["labels"].update({"Mayor|Fix road": True}) for x in e]),
         f"prefs.yaml: profile '{name}': field 'labels': context 'Mayor | Fix road'"),
        (edit(lambda p, e, f: e[4].update(statement="Use my first name.")),
         f"prefs.yaml: profile '{name}': preference 4: field 'statement': nickname preference"),
        (edit(lambda p, e, f: f.update({"Nobody": e})), "prefs.yaml: profile 'Nobody' is not in"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_cimemories_malformed_inputs_name_file_and_field(tmp_path, case):
    (profiles, prefs), message = bad_profile_cases()[case]
    data = write_cimemories(tmp_path, profiles, prefs)
    with pytest.raises(DataError) as info:
        load_instances(BenchPresData(**data), None)
    assert message in str(info.value)
    assert str(tmp_path) in str(info.value)


# ---------------------------------------------------------------- conditions

def test_no_preferences_removes_exactly_the_statement_lines():
    (inst,) = load_instances(BenchPresData("sample"), 1)
    (changed,) = apply_condition([inst], BenchPresCondition("c", **{"memory": "without_preferences"}))
    statements = {f"- {p.statement}" for p in inst.preferences}
    original = inst.prompt.split("\n")
    assert len(statements) == 5 and statements <= set(original)
    assert changed.prompt.split("\n") == [line for line in original if line not in statements]
    assert changed.preferences == inst.preferences  # the same gold labels are still scored


def test_no_preferences_fails_when_a_statement_is_not_a_memory_line():
    prompt = "<memory>\n- I like bullet points in every reply.\n</memory>\nI like bullet points."
    with pytest.raises(DataError, match=r"f\.jsonl: row 7: field 'prompt': preference statement "
                                        r"'I like bullet points\.' is not a line"):
        without_preferences(prompt, ["I like bullet points."], "f.jsonl: row 7")
    assert without_preferences("<memory>\n* A.\n- B.\n</memory>\nA.", ["A."], "x") == "<memory>\n- B.\n</memory>\nA."


def test_defense_appends_the_instruction_and_unknown_modes_fail():
    (inst,) = load_instances(BenchPresData("sample"), 1)
    (changed,) = apply_condition([inst], BenchPresCondition("c", **{"memory": "full", "instruction": "defense"}))
    instruction = (PACKAGE / "prompts/defense.txt").read_text().strip()
    assert changed.prompt == inst.prompt.rstrip("\n") + "\n\n" + instruction + "\n"
    with pytest.raises(DataError, match="condition.memory"):
        apply_condition([inst], BenchPresCondition("c", **{"memory": "half"}))


# ---------------------------------------------------------------- end to end over all conditions

# three contexts: with the fake's answer rule, one answer of this run names the nickname (the stored
# span's both cases are exercised below)
LIMIT, SAMPLES = 3, 3


def condition_prompt(row, condition):
    """The prompt each condition should send, rebuilt here from the stored sample row."""
    if condition == "no_preferences":
        drop = {f"- {s}" for s in row["preference_attribute"]}
        return "\n".join(line for line in row["prompt"].split("\n") if line not in drop)
    if condition == "defense":
        return row["prompt"].rstrip("\n") + "\n\n" + (PACKAGE / "prompts/defense.txt").read_text().strip() + "\n"
    return row["prompt"]


def expected_metrics(shards, condition):
    """MR/AAR (per sample, then averaged) and mean completeness from the fake's answer rule."""
    texts = {(r["instance_id"], r["sample"]): r["text"] for r in shards
             if r["stage"] == "generate" and r["condition"] == condition}
    assert len(texts) == LIMIT * SAMPLES
    hits = {(g, s): [0, 0] for g in (False, True) for s in range(SAMPLES)}  # -> [applied, total]
    scores = {}
    for row in SAMPLE_ROWS[:LIMIT]:
        iid = "--".join(re.sub(r"[^a-z0-9]+", "-", row[k].lower()).strip("-") for k in ("name", "recipient", "task"))
        for sample in range(SAMPLES):
            text = texts[(iid, sample)]
            assert text == answer_text([{"role": "user", "content": condition_prompt(row, condition)}], sample)
            for pref, g, category in zip(row["preference_attribute"], row["preference_label"],
                                         row["preference_category"]):
                z = independent_verdict(pref, category, text)
                hits[(g, sample)][0] += z
                hits[(g, sample)][1] += 1
            messages = list(completeness_messages(row["recipient"], row["task"], text))
            scores[(iid, sample)] = answer_json(COMPLETENESS_SCHEMA, messages, 0)["score"]
    rate = {g: sum(hits[(g, s)][0] / hits[(g, s)][1] for s in range(SAMPLES)) / SAMPLES for g in (False, True)}
    return {"MR": rate[False], "AAR": rate[True], "completeness": sum(scores.values()) / len(scores),
            "scores": scores}


@pytest.mark.e2e
def test_sweep_over_every_condition_equals_independent_expectation(run_cli, fake_server, tmp_path):
    run_dir = tmp_path / "run"
    run_cli("-m", "benchmark=benchpres", "condition=all", "model=fake", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", f"limit={LIMIT}", f"benchmark.samples={SAMPLES}")
    with open(run_dir / "metrics.csv") as handle:
        metrics = {(r["condition"], r["metric"]): r for r in csv.DictReader(handle)}
    shards = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    expected = {c: expected_metrics(shards, c) for c in ("default", "defense", "no_preferences")}
    for condition, values in expected.items():
        for name in ("MR", "AAR", "completeness"):
            assert float(metrics[(condition, name)]["value"]) == pytest.approx(values[name], abs=1e-12)
            assert metrics[(condition, name)]["excluded"] == "0"
        assert float(metrics[(condition, "AAR-MR")]["value"]) == pytest.approx(values["AAR"] - values["MR"], abs=1e-12)
        for name in ("failures_judge", "failures_model", "failures_no_answer", "unmapped_contexts"):
            assert float(metrics[(condition, name)]["value"]) == 0
        assert metrics[(condition, "failures_model")]["n"] == str(LIMIT * SAMPLES)
        assert metrics[(condition, "unmapped_contexts")]["n"] == str(LIMIT)
    # paired: per (instance, sample), default minus no_preferences, then the mean
    pairs = [expected["default"]["scores"][k] - expected["no_preferences"]["scores"][k]
             for k in expected["default"]["scores"]]
    assert float(metrics[("default", "completeness_delta")]["value"]) == pytest.approx(sum(pairs) / len(pairs),
                                                                                       abs=1e-12)
    assert metrics[("default", "completeness_delta")]["n"] == str(LIMIT * SAMPLES)
    assert ("no_preferences", "completeness_delta") not in metrics
    # 5 preferences per instance: 4 judged, the nickname matched; one completeness call per response
    assert fake_server.stats()["requests"] == 3 * LIMIT * SAMPLES * (1 + 4 + 1)
    assert_nickname_spans_stored(shards)


def assert_nickname_spans_stored(shards):
    """Every answered generation row stores its nickname decision: the span and offset where the
    quoted name occurs in the answer (found here with str.find), nothing when it does not."""
    seen = {True: 0, False: 0}
    for r in shards:
        if r["stage"] != "generate":
            continue
        meta = json.loads(r["meta_json"])
        nicks = {str(i): re.search(r"'([^']+)'", p["statement"]).group(1)
                 for i, p in enumerate(meta["preferences"]) if p["category"] == "nickname"}
        record = json.loads(r["parsed_json"])
        assert record["empty"] is (not r["text"].strip())  # whether the reply was empty, stored with it
        stored = record["nicknames"]
        assert set(stored) == set(nicks)
        for index, name in nicks.items():
            at = r["text"].find(name)
            present = at >= 0 and not (r["text"][at - 1:at].isalnum() or r["text"][at + len(name):][:1].isalnum())
            expected = {"nickname": name, "span": name, "start": at} if present else \
                {"nickname": name, "span": None, "start": None}
            assert stored[index] == expected, (r["text"], stored)
            seen[present] += 1
    assert seen[True] > 0 and seen[False] > 0, seen        # both cases occur in this run


def test_the_stored_nickname_decision_is_the_one_the_metrics_read():
    from prefray.benchmarks.benchpres.benchmark import read_nicknames
    from prefray.benchmarks.benchpres.tables import decisions
    from prefray.engine.types import ChatRequest, WorkUnit

    prefs = [{"statement": "Call me 'Captain Jo'.", "g": True, "category": "nickname", "nickname": "Captain Jo"},
             {"statement": "I like short answers.", "g": False, "category": "style"}]
    unit = WorkUnit("i", ChatRequest(messages=()), meta={"preferences": prefs})
    assert read_nicknames(unit, "Dear Captain Jo, here") == {
        "nicknames": {"0": {"nickname": "Captain Jo", "span": "Captain Jo", "start": 5}}, "empty": False}
    assert read_nicknames(unit, "Dear captain jo") == {"nicknames": {"0": {"nickname": "Captain Jo", "span": None,
                                                                           "start": None}}, "empty": False}
    assert read_nicknames(WorkUnit("i", ChatRequest(messages=()), meta={"preferences": prefs[1:]}), "x") == {
        "nicknames": {}, "empty": False}
    assert read_nicknames(unit, " \n\t")["empty"] is True

    def generation(text, stored):
        base = {name: None for name in SHARD_SCHEMA.names}
        return {**base, "unit_id": "generate/i/0", "attempt": 1, "benchmark": "benchpres", "model": "m",
                "condition": "c", "stage": "generate", "role": "subject", "judge": "", "cause": "",
                "instance_id": "i", "item": "", "sample": 0, "status": "ok", "text": text,
                "meta_json": json.dumps({"domain": "d", "preferences": prefs}),
                "parsed_json": None if stored is None else json.dumps(stored)}

    # the stored decision is what counts (here it disagrees with the text, to show which one is read)
    stored = {"nicknames": {"0": {"nickname": "Captain Jo", "span": "Captain Jo", "start": 0}}, "empty": False}
    rows = pa.Table.from_pylist([generation("no name here", stored)], schema=SHARD_SCHEMA)
    assert [(d["z"], d["evidence"]) for d in decisions(rows).to_pylist()] == [(True, "Captain Jo")]
    # a row stored before decisions were recorded: the same rule, applied to its text
    rows = pa.Table.from_pylist([generation("Hi Captain Jo!", None)], schema=SHARD_SCHEMA)
    assert [(d["z"], d["evidence"]) for d in decisions(rows).to_pylist()] == [(True, "Captain Jo")]


def test_aggregation_reads_the_text_of_only_the_rows_whose_decision_is_not_stored(tmp_path):
    """The narrow read leaves `text` on disk except for answered generation rows of old runs (no
    stored record of the nickname decision and the reply's emptiness); their decisions, and those of
    stored rows, are the same as from a full read."""
    import pyarrow.compute as pc

    from prefray.benchmarks.benchpres.tables import decisions
    from prefray.engine.results.aggregate import text_needed, with_text
    from prefray.engine.rundir.shards import latest_attempts, read_rows

    prefs = [{"statement": "Call me 'Captain Jo'.", "g": True, "category": "nickname", "nickname": "Captain Jo"}]
    stored = {"nicknames": {"0": {"nickname": "Captain Jo", "span": None, "start": None}}, "empty": False}

    def row(instance, attempt, status, text, parsed, benchmark="benchpres", preferences=prefs):
        base = {name: None for name in SHARD_SCHEMA.names}
        return {**base, "unit_id": f"generate/{instance}/0", "attempt": attempt, "benchmark": benchmark, "model": "m",
                "condition": "c", "stage": "generate", "role": "subject", "judge": "", "cause": "",
                "instance_id": instance, "item": "", "sample": 0, "status": status, "text": text,
                "meta_json": json.dumps({"domain": "d", "preferences": preferences}),
                "parsed_json": None if parsed is None else json.dumps(parsed)}

    rows = [row("new", 1, "ok", "Hello Captain Jo", stored),             # stored: its text is not read
            row("old", 1, "failed", "half an answer", None),              # an older attempt: not the best
            row("old", 2, "ok", "Hi Captain Jo!", None),                  # old run: matched on its text
            row("plain", 1, "ok", "Hello", {"nicknames": {}, "empty": False}, preferences=[]),  # stored, no nickname
            row("nickless", 1, "ok", "   ", None, preferences=[]),        # old run: its emptiness from its text
            row("half", 1, "ok", "Hi Captain Jo", {"nicknames": stored["nicknames"]}),  # stored before `empty`
            row("lost", 1, "failed", "", None),                           # no answer: nothing to read
            row("other", 1, "ok", "kept", None, benchmark="elsewhere")]   # a benchmark without the hook
    run = RunDir(tmp_path)
    folder = run.job("benchpres", "m", "c")
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), folder / "part-0.parquet")

    best = latest_attempts(read_rows(run, columns=[n for n in SHARD_SCHEMA.names if n != "text"]))
    narrow = with_text(run, best, text_needed(best, {"benchpres": BENCHMARK, "elsewhere": Benchmark()}))
    texts = dict(zip(narrow["instance_id"].to_pylist(), narrow["text"].to_pylist()))
    assert texts == {"new": None, "old": "Hi Captain Jo!", "plain": None, "nickless": "   ", "half": "Hi Captain Jo",
                     "lost": None, "other": "kept"}
    full = latest_attempts(read_rows(run))
    ours = pc.equal(narrow["benchmark"], "benchpres")
    assert (decisions(narrow.filter(ours)).to_pylist()
            == decisions(full.filter(pc.equal(full["benchmark"], "benchpres"))).to_pylist())
    assert sorted((d["instance_id"], d["z"]) for d in decisions(narrow.filter(ours)).to_pylist()) == [
        ("half", False), ("lost", None), ("new", False), ("old", True)]
