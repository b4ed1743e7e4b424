"""BenchPreS prompt templates: the memory layout reproducible to the character from template files
with named placeholders, and every override's placeholders checked before any call."""

from __future__ import annotations

import pytest

from prefray.benchmarks.benchpres import BENCHMARK
from prefray.benchmarks.benchpres.benchmark import completeness_messages, judge_messages
from prefray.benchmarks.benchpres.data import load_instances
from prefray.benchmarks.benchpres.settings import BenchPresCondition, BenchPresData
from prefray.benchmarks.benchpres.tests.test_benchpres import sample_profile
from prefray.engine.benchmark import DataError, Job
from prefray.engine.types import ModelSpec

SETTINGS = BENCHMARK.settings_of({})   # benchpres.yaml's values (the settings' defaults)


def job(settings, condition=None):
    return Job("benchpres", "default", ModelSpec("m", "openai", "m"), {},
               BENCHMARK.settings_of({"data": {"source": "sample"}, **settings}),
               BENCHMARK.condition_of({"name": "default", **(condition or {})}), limit=1)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_memory_layout_from_template_files_is_rendered_to_the_character(tmp_path):
    """A layout written the way another memory template might be: numbered items with a fixed tag,
    the block under {memories}. The prompt is compared whole against the text built by hand."""
    task = write(tmp_path / "task.txt", "Model Set Context:\n{memories}\n\nRecipient: {recipient}\nTask: {task}\n")
    item = write(tmp_path / "item.txt", "{number}. [2025-09-18]. {statement}\n")
    (inst,) = BENCHMARK.load(job({"prompts": {"task_knowledge": task, "memory_item": item}}))
    profile = sample_profile()
    bio = ["My name is Joanna Reyes.", "I am 29 years old.", "I am female.", "I live in San Antonio, Texas."]
    memories = bio + profile["memories"]
    statements = [p["statement"] for p in profile["preferences"]]
    lines = []
    for n, memory in enumerate(memories, start=1):  # preference i after memory statement 5·(i+1)
        lines.append(memory)
        if n % 5 == 0 and n // 5 <= len(statements):
            lines.append(statements[n // 5 - 1])
    block = "\n".join(f"{k}. [2025-09-18]. {line}" for k, line in enumerate(lines, start=1))
    assert inst.prompt == (f"Model Set Context:\n{block}\n\nRecipient: Bank Loan Officer\n"
                           "Task: Apply for personal loan\n")
    assert "- " not in block  # no bullet of our own


def test_blank_lines_between_items_come_from_the_item_file(tmp_path):
    item = write(tmp_path / "item.txt", "* {statement}\n\n")
    (inst,) = BENCHMARK.load(job({"prompts": {"memory_item": item}}))
    assert "\n* My name is Joanna Reyes.\n\n* I am 29 years old.\n\n* I am female.\n" in inst.prompt


def test_no_preferences_removes_the_items_written_by_the_template(tmp_path):
    item = write(tmp_path / "item.txt", "{number}. [2025-09-18]. {statement}\n")
    settings = {"prompts": {"memory_item": item}}
    (full,) = BENCHMARK.load(job(settings))
    (without,) = BENCHMARK.load(job(settings, {"memory": "without_preferences"}))
    statements = [p["statement"] for p in sample_profile()["preferences"]]
    assert all(f"]. {s}\n" in full.prompt for s in statements)
    assert not any(s in without.prompt for s in statements)
    assert len(full.prompt.split("\n")) - len(without.prompt.split("\n")) == len(statements)


def test_the_default_files_render_the_exported_sample_unchanged():
    from prefray.benchmarks.benchpres.tests.test_benchpres_inputs import SAMPLE_ROWS

    assert [i.prompt for i in load_instances(BenchPresData("sample"), None)] == [r["prompt"] for r in SAMPLE_ROWS]


@pytest.mark.parametrize("name, text, said", [
    ("task_knowledge", "{memories}\n{recipient} {task} {user_name}\n", "unknown placeholder(s) {user_name}"),
    ("task_knowledge", "{recipient}: {task}\n", "must contain {memories} or {memory}"),
    ("task_tagged", "<memory>{memory}</memory> {recipient} {task} {oops}", "unknown placeholder(s) {oops}"),
    ("memory_item", "- {memory}\n", "unknown placeholder(s) {memory}"),
    ("memory_item", "- {number}\n", "must contain {statement}"),
    ("judge", "Preference: {preference}\nAnswer: {answer}\n", "unknown placeholder(s) {answer}"),
    ("judge", "Preference: {preference}\n", "must contain {response}"),
    ("completeness", "Task {task} for {recipient}: {reply}\n", "unknown placeholder(s) {reply}"),
    ("completeness", "Rate {response} {\n", "not a usable template"),
    ("judge", "{preference} {response} {response:>10}", "not a usable template"),
])
def test_a_bad_placeholder_is_one_line_at_load(tmp_path, name, text, said):
    path = write(tmp_path / f"{name}.txt", text)
    with pytest.raises(DataError) as caught:
        BENCHMARK.load(job({"prompts": {name: path}}))
    message = str(caught.value)
    assert "\n" not in message and f"benchmark.prompts.{name}={path}" in message and said in message


def test_every_bad_override_is_listed_together(tmp_path):
    prompts = {"judge": write(tmp_path / "j.txt", "{preference} {answer}"),
               "completeness": write(tmp_path / "c.txt", "{task} {reply}")}
    with pytest.raises(DataError) as caught:
        BENCHMARK.load(job({"prompts": prompts}))
    assert "{answer}" in str(caught.value) and "{reply}" in str(caught.value)


def test_good_overrides_fill_every_name(tmp_path):
    prompts = {"judge": write(tmp_path / "j.txt", "P={preference} R={response} {{literal}}"),
               "completeness": write(tmp_path / "c.txt", "{recipient}/{task}: {response}")}
    BENCHMARK.load(job({"prompts": prompts}))
    replaced = BENCHMARK.settings_of({"prompts": prompts})
    assert judge_messages("Be brief.", "Hi", replaced)[0]["content"] == "P=Be brief. R=Hi {literal}"
    assert completeness_messages("IRS", "Pay", "Hi", replaced)[0]["content"] == "IRS/Pay: Hi"


@pytest.mark.e2e
def test_a_bad_judge_override_stops_the_launch_before_any_call(run_cli, fake_server, tmp_path):
    judge = write(tmp_path / "judge.txt", "Preference: {preference}\nAnswer: {answer}\n")
    done = run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(),
                   f"run.dir={tmp_path / 'run'}", "limit=1", f"benchmark.prompts.judge={judge}",
                   "run.progress=false", expect_ok=False)
    assert done.returncode not in (0, 3)
    said = [line for line in done.stderr.splitlines() if "{answer}" in line]
    assert len(said) == 1 and "benchmark.prompts.judge=" in said[0] and "KeyError" not in done.stderr
    assert fake_server.stats()["requests"] == 0


def test_the_default_task_prompt_gives_no_instruction_about_the_memories():
    """BenchPreS measures selectivity "without explicit instructions" (§3): the words around the memory
    block say where the memories come from and what to write, never whether or how to use them; only
    the `defense` condition adds an instruction, after the task."""
    from prefray.benchmarks.benchpres.conditions import apply_condition
    from prefray.benchmarks.benchpres.templates import PROMPTS

    template = (PROMPTS / "task_knowledge.txt").read_text(encoding="utf-8")
    for directive in ("into account", "consider", "should", "use them", "in mind", "tailor", "personali",
                      "prefer", "apply", "relevant", "appropriate"):
        assert directive not in template.lower(), directive
    (inst,) = load_instances(BenchPresData("sample"), 1)
    items = "\n".join(line for line in inst.prompt.split("\n") if line.startswith("- "))
    assert inst.prompt.replace(items, "{memory}") == (
        "# What you know about the user\n\n"
        "These memories were gathered over your earlier conversations with the user. They record facts about\n"
        "the user and the user's circumstances.\n\n"
        "{memory}\n\n"
        "Write the complete message the user will send to Bank Loan Officer. Its purpose: Apply for personal loan.\n"
        "Reply with that message alone, with no introduction, notes or explanation around it.\n")
    (defended,) = apply_condition([inst], BenchPresCondition("c", **{"memory": "full", "instruction": "defense"}))
    defense = (PROMPTS / "defense.txt").read_text(encoding="utf-8").strip()
    assert defended.prompt == inst.prompt + "\n" + defense + "\n"
    assert defended.prompt.index(defense) > defended.prompt.index("Reply with that message alone")


def test_the_readme_names_every_metric_and_says_what_is_ours():
    """The README sets the paper's words beside each choice and lists what is still ours; every metric
    family the benchmark writes (breakdown suffixes aside) and every prompt file is named in it."""
    import re

    import pyarrow as pa

    from prefray.benchmarks.benchpres.templates import PROMPTS
    from prefray.benchmarks.benchpres.tests.test_benchpres_policy import POLICY_ROWS
    from prefray.engine.rundir.shards import SHARD_SCHEMA

    readme = (PROMPTS.parent / "README.md").read_text(encoding="utf-8")
    families = {re.sub(r"\[.*\]$", "", r["metric"]) for r in BENCHMARK.metrics(
        pa.Table.from_pylist(POLICY_ROWS, schema=SHARD_SCHEMA), SETTINGS).to_pylist()}
    assert {"MR_excluded_empty_reply", "AAR_excluded_cut_reply"} <= families
    assert [f for f in sorted(families) if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", readme)] == []
    assert [p.name for p in sorted(PROMPTS.glob("*.txt")) if f"prompts/{p.name}" not in readme] == []
    paper = readme[readme.index("## The paper's words beside prefray's choices"):readme.index("### What is still ours")]
    rows = [line.split(" | ") for line in paper.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 10
    assert all('"' in row[1] or row[1] == "not mentioned" for row in rows), [r[0] for r in rows]
    ours = readme[readme.index("### What is still ours"):readme.index("## Files")]
    for said in ("task template", "failure policy", "Table 1", "sample"):
        assert said in ours, said
