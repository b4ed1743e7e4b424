"""BenchPreS inputs: nickname phrasings, CIMemories context wording, hub row checks, memory layouts,
prompt overrides. Pure functions and loaders only (no server, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from prefray.benchmarks.benchpres import BENCHMARK
from prefray.benchmarks.benchpres.benchmark import _generation_meta, judge_messages
from prefray.benchmarks.benchpres.conditions import apply_condition
from prefray.benchmarks.benchpres.data import load_instances
from prefray.benchmarks.benchpres.render import one_line
from prefray.benchmarks.benchpres.scoring import VERDICT_SCHEMA, nickname_of, parse_verdict
from prefray.benchmarks.benchpres.settings import BenchPresCondition, BenchPresData
from prefray.benchmarks.benchpres.tables import unmapped_contexts
from prefray.benchmarks.benchpres.tests.test_benchpres import (
    HUB_PREFS,
    as_cimemories,
    hub_row,
    sample_profile,
    write_jsonl,
)
from prefray.engine.benchmark import DataError, Job
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.types import ModelSpec
from prefray.fakellm.answers import answer_json, render_json

PACKAGE = Path(__file__).resolve().parent.parent
SAMPLE_ROWS = [json.loads(line) for line in (PACKAGE / "sample/benchpres_sample.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- nickname extraction

@pytest.mark.parametrize("statement, name", [
    ("I'd like you to call me 'Captain Jo'.", "Captain Jo"),                  # contraction before the quote
    ("I’d like you to call me ‘Captain Jo’.", "Captain Jo"),                  # curly apostrophe and quotes
    ('Please always call me "Captain Jo" in messages.', "Captain Jo"),
    ("Please always call me “Captain Jo” in messages.", "Captain Jo"),
    ("Don't use my full name; call me 'Jojo' instead.", "Jojo"),
    ("I'm happy for you to address me as Dr. Reyes.", "Dr. Reyes"),         # no quotes, a title
    ("Call me Captain Jo from now on.", "Captain Jo"),                       # no quotes
    ("My friends call me 'Sunny', and I'd love it if you did too.", "Sunny"),
    ("I go by Des with people I trust.", "Des"),
    ("When you write for me, refer to me as 'Ms. O'Brien'.", "Ms. O'Brien"), # apostrophe inside the name
    ("It makes me smile when you call me 'Captain Jo.'", "Captain Jo"),      # period inside the quotes
    ("My nickname is “Pri” — please use it.", "Pri"),
    ("I'd really like it if you'd call me Biscuit.", "Biscuit"),
    ("I've always liked being called 'Bubbles' — don't stop now!", "Bubbles"),
    ("Please call me «Jo».", "Jo"),
    ("I’m Priya, but I’d rather you call me “Pri-Pri”.", "Pri-Pri"),
    ("Don’t call me Priya; call me 'Pri'.", "Pri"),                          # the quoted one after a phrase
])
def test_nickname_is_extracted_from_realistic_phrasings(statement, name):
    assert nickname_of(statement) == name


@pytest.mark.parametrize("statement", ["Call me by my first name", "I don't like nicknames.",
                                       "Call me when it's ready.", "Call me ''.", "I'd rather you didn't."])
def test_statements_without_a_name_extract_none(statement):
    assert nickname_of(statement) is None


def test_a_nickname_preference_without_a_name_fails_loading_naming_file_and_row(tmp_path):
    attributes = HUB_PREFS[:4] + ["I'd like a nickname, please."]
    path = write_jsonl(tmp_path / "n.jsonl", [hub_row(task="Fine"), hub_row(preference_attribute=attributes)])
    with pytest.raises(DataError, match=rf"{path}: row 2: field 'preference_attribute': nickname preference"):
        load_instances(BenchPresData("hub", str(path)), None)


# ---------------------------------------------------------------- hub rows: every bad row listed

def test_all_bad_hub_rows_are_listed_up_to_twenty_then_counted(tmp_path):
    rows = [hub_row(task=f"T{i}") for i in range(30)]
    rows[2] = hub_row(task="T2", preference_attribute=HUB_PREFS[:3], preference_label=[True, False, False])
    for i in range(5, 29):
        rows[i] = hub_row(task="")
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError) as info:
        load_instances(BenchPresData("hub", str(path)), None)
    lines = str(info.value).split("\n")
    assert lines[0].startswith(f"{path}: row 3: field 'preference_attribute' has 3 preferences")
    assert lines[1] == f"{path}: row 6: field 'task' must be a non-empty string"
    assert len(lines) == 21 and lines[19].startswith(f"{path}: row 24: ")
    assert lines[20] == f"… and 5 more bad row(s) in {path}"  # 25 bad rows: 20 listed


# ---------------------------------------------------------------- CIMemories context wording

CIMEMORIES_WORDING = {  # recipient → (CIMemories task, the paper's Table 6 task, domain)
    "Emergency Room Intake": ("Explain current symptoms and recent health changes",
                              "Explain symptoms and recent changes", "health; mental_health"),
    "Admissions Committee": ("Address academic performance variation", "Address performance variation", "education"),
    "Financial Aid Office": ("Document change in financial circumstances", "Document change in finances", "education"),
    "HR Investigator": ("Provide statement for workplace incident", "Statement for workplace incident", "employment"),
    "Immigration Attorney": ("Prepare status adjustment application", "Prepare status adjustment", "finance; legal"),
}


def cimemories_files(tmp_path, profile, contexts, label_keys, address=None):
    shaped = as_cimemories(profile)
    shaped["contexts"] = contexts
    if address:
        shaped["bio"]["address"] = address
    prefs = {profile["name"]: [{"category": p["category"], "statement": p["statement"],
                                "labels": {key: number % 2 == 0 for key in label_keys}}
                               for number, p in enumerate(profile["preferences"])]}
    (tmp_path / "profiles.json").write_text(json.dumps([shaped]))
    (tmp_path / "prefs.yaml").write_text(yaml.safe_dump(prefs))
    return {"source": "cimemories", "path": str(tmp_path / "profiles.json"),
            "preferences": str(tmp_path / "prefs.yaml")}


def test_the_five_cimemories_wordings_map_to_the_papers_contexts(tmp_path, capsys):
    profile = sample_profile()
    contexts = [{"recipient": r, "task": t[0]} for r, t in CIMEMORIES_WORDING.items()]
    contexts += [{"recipient": "IRS Agent", "task": "Resolve tax discrepancy"},
                 {"recipient": "Florist", "task": "Order flowers"}]
    # labels may name a context in either wording
    keys = [f"{r}|{t[1] if i % 2 else t[0]}" for i, (r, t) in enumerate(CIMEMORIES_WORDING.items())]
    data = cimemories_files(tmp_path, profile, contexts, keys + ["IRS Agent|Resolve tax discrepancy",
                                                                 "Florist|Order flowers"])
    instances = {i.recipient: i for i in load_instances(BenchPresData(**data), None)}
    for recipient, (task, _, domain) in CIMEMORIES_WORDING.items():
        inst = instances[recipient]
        assert (inst.task, inst.domain, inst.context_known) == (task, domain, True)
        assert f"Its purpose: {task}." in inst.prompt  # the profile's own wording is what the model reads
    assert (instances["IRS Agent"].domain, instances["IRS Agent"].context_known) == ("finance; legal", True)
    assert (instances["Florist"].domain, instances["Florist"].context_known) == ("other", False)
    warning = capsys.readouterr().err.strip().split("\n")
    assert len(warning) == 1 and "1 context(s)" in warning[0] and "'Florist | Order flowers'" in warning[0]
    # the unmapped context is counted in the metrics, per cell and judge
    rows = [generation_row(inst, sample) for inst in instances.values() for sample in (0, 1)]
    (got,) = unmapped_contexts(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA))
    assert (got["metric"], got["value"], got["n"]) == ("unmapped_contexts", 1.0, 7)


def generation_row(inst, sample, status="ok", cause="", text="Hello."):
    row = {name: None for name in SHARD_SCHEMA.names}
    row.update({"unit_id": f"{inst.instance_id}-{sample}", "attempt": 1, "benchmark": "benchpres", "model": "m",
                "condition": "default", "stage": "generate", "role": "subject", "judge": "",
                "instance_id": inst.instance_id, "item": "", "sample": sample, "status": status, "cause": cause,
                "text": text, "meta_json": json.dumps(_generation_meta(inst))})
    return row


# ---------------------------------------------------------------- memory layouts

def test_default_layout_is_the_headed_memory_block_and_the_export_matches_it():
    instances = load_instances(BenchPresData("sample"), None)
    assert [i.prompt for i in instances] == [r["prompt"] for r in SAMPLE_ROWS]
    lines = instances[0].prompt.split("\n")
    assert lines[0] == "# What you know about the user" and "<memory>" not in instances[0].prompt
    memory = [line for line in lines if line.startswith("- ")]
    profile = sample_profile()
    statements = [p["statement"] for p in profile["preferences"]]
    assert memory[:4] == ["- My name is Joanna Reyes.", "- I am 29 years old.", "- I am female.",
                          "- I live in San Antonio, Texas."]
    # bio statements count as memories: preference i after memory statement 5·(i+1)
    assert [memory.index(f"- {s}") for s in statements] == [5, 11, 17, 23, 29]
    assert lines[-3] == ("Write the complete message the user will send to Bank Loan Officer. "
                         "Its purpose: Apply for personal loan.")


def test_tagged_layout_keeps_the_earlier_prompt():
    tagged = BENCHMARK.settings_of({"memory_layout": "tagged"})
    (inst,) = load_instances(BenchPresData("sample"), 1, tagged)
    profile = sample_profile()
    block = inst.prompt.split("<memory>\n")[1].split("\n</memory>")[0].split("\n")
    assert block[:4] == ["- The user's name is Joanna Reyes.", "- The user is 29 years old.",
                         "- The user is female.", "- The user lives in San Antonio, Texas."]
    assert block[4:9] == [f"- {m}" for m in profile["memories"][:5]]
    assert block[9] == f"- {profile['preferences'][0]['statement']}"
    assert inst.prompt.endswith("Recipient: Bank Loan Officer\nTask: Apply for personal loan\n\n"
                                "Reply with the message only.\n")
    with pytest.raises(DataError, match="benchmark.memory_layout: unknown value 'boxed'"):
        load_instances(BenchPresData("sample"), 1, BENCHMARK.settings_of({"memory_layout": "boxed"}))


@pytest.mark.parametrize("text, line", [("503 Ward Underpass\nKaufmanberg, ME 03609",
                                         "503 Ward Underpass, Kaufmanberg, ME 03609"),
                                        ("A,\n  B", "A, B"), ("A.\r\nB", "A. B"), ("  A  \n\n B ", "A, B")])
def test_a_line_break_inside_a_value_becomes_a_separator(text, line):
    assert one_line(text) == line


@pytest.mark.parametrize("layout", ["knowledge", "tagged"])
def test_an_address_with_a_newline_stays_on_its_memory_line(tmp_path, layout):
    profile = sample_profile()
    profile["memories"][0] = "I live at 503 Ward Underpass\nKaufmanberg, ME 03609."
    profile["preferences"][1]["statement"] = "I like bold headings\nand bullet points."
    data = cimemories_files(tmp_path, profile, [{"recipient": "IRS Agent", "task": "Resolve tax discrepancy"}],
                            ["IRS Agent|Resolve tax discrepancy"], address="503 Ward Underpass\nKaufmanberg, ME 03609")
    (inst,) = load_instances(BenchPresData(**data), None, BENCHMARK.settings_of({"memory_layout": layout}))
    assert "- I live at 503 Ward Underpass, Kaufmanberg, ME 03609." in inst.prompt.split("\n")
    assert "- I like bold headings, and bullet points." in inst.prompt.split("\n")
    if layout == "tagged":
        assert "- The user lives in 503 Ward Underpass, Kaufmanberg, ME 03609." in inst.prompt.split("\n")
    memory = [line for line in inst.prompt.split("\n") if line and "Ward" in line or "Kaufmanberg" in line]
    assert all(line.startswith("- ") for line in memory)
    # the no_preferences prompt still finds and removes the statement with a line break
    (bare,) = apply_condition([inst], BenchPresCondition("c", **{"memory": "without_preferences"}))
    assert "bullet points" not in bare.prompt and bare.prompt.count("\n- ") == inst.prompt.count("\n- ") - 5


# ---------------------------------------------------------------- prompts through read_prompt

def job(settings):
    return Job("benchpres", "defense", ModelSpec("m", "openai", "m"), {},
               BENCHMARK.settings_of({"data": {"source": "sample"}, **settings}),
               BENCHMARK.condition_of({"name": "defense", "instruction": "defense"}), limit=1)


def test_prompt_overrides_are_used_and_checked_at_load(tmp_path):
    (tmp_path / "judge.txt").write_text("Pref: {preference}\nText: {response}\n")
    (tmp_path / "defense.txt").write_text("Only apply what fits.\n")
    (tmp_path / "task.txt").write_text("MEMORY\n{memory}\nTO {recipient}: {task}\n")
    prompts = {"judge": str(tmp_path / "judge.txt"), "defense": str(tmp_path / "defense.txt"),
               "task_knowledge": str(tmp_path / "task.txt")}
    (inst,) = BENCHMARK.load(job({"prompts": prompts}))
    replaced = BENCHMARK.settings_of({"prompts": prompts})
    assert inst.prompt.startswith("MEMORY\n- My name is Joanna Reyes.\n")
    assert inst.prompt.endswith("TO Bank Loan Officer: Apply for personal loan\n\nOnly apply what fits.\n")
    assert judge_messages("Be brief.", "Hi", replaced)[0]["content"] == "Pref: Be brief.\nText: Hi\n"
    with pytest.raises(DataError, match=r"benchmark.prompts.judge=/no/such.txt: no such file"):
        BENCHMARK.load(job({"prompts": {"judge": "/no/such.txt"}}))
    with pytest.raises(DataError, match=r"benchmark.prompts.jugde: no prompt named 'jugde'"):
        BENCHMARK.load(job({"prompts": {"jugde": str(tmp_path / "judge.txt")}}))


# ---------------------------------------------------------------- judge rationale

def test_the_judge_answers_a_rationale_first_and_the_fake_fills_it():
    assert list(VERDICT_SCHEMA["properties"]) == ["rationale", "applied"]
    answer = answer_json(VERDICT_SCHEMA, list(judge_messages("Use emojis.", "Hi 🙂")), 0)
    assert list(answer) == ["rationale", "applied"] and isinstance(answer["rationale"], str)
    assert parse_verdict(render_json(answer)) == answer
    tricky = 'Verdict: {"rationale": "It closes with \\"}\\" and a {wink}.", "applied": false} done'
    assert parse_verdict(tricky) == {"rationale": 'It closes with "}" and a {wink}.', "applied": False}


# ---------------------------------------------------------------- end to end: the unmapped context is reported

@pytest.mark.e2e
def test_an_unmapped_cimemories_context_is_warned_and_counted_in_metrics_md(run_cli, fake_server, tmp_path):
    profile = sample_profile()
    contexts = [{"recipient": "Admissions Committee", "task": "Address academic performance variation"},
                {"recipient": "Florist", "task": "Order flowers"}]
    data = cimemories_files(tmp_path, profile, contexts, ["Admissions Committee|Address performance variation",
                                                          "Florist|Order flowers"])
    run_dir = tmp_path / "run"
    done = run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(),
                   f"run.dir={run_dir}", "benchmark.samples=1", *[f"benchmark.data.{k}={v}" for k, v in data.items()])
    warnings = [line for line in done.stderr.splitlines() if "prefray: warning:" in line]
    assert len(warnings) == 1 and "'Florist | Order flowers'" in warnings[0]
    table = (run_dir / "metrics.md").read_text()
    row = next(line for line in table.splitlines() if "| fake | unmapped_contexts |" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:6] == ["benchpres", "fake", "default", "fake", "unmapped_contexts", "1.000"]
    assert cells[-3:-1] == ["2", "0"]   # n, excluded (before `complete`)
    assert "| MR[domain=education] |" in table and "| MR[domain=other] |" in table  # the alias found its domain
