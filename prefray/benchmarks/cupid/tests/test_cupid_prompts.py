"""CUPID prompts: what each stage sends, prompt files replaced by path (checked at load, used end to
end through the real CLI and the fake provider's request log), and load errors said once."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from prefray.benchmarks.cupid import BENCHMARK
from prefray.benchmarks.cupid.prompting import (
    PROMPTS,
    check_prompts,
    decompose_messages,
    infer_messages,
    match_messages,
)
from prefray.benchmarks.cupid.tests.test_cupid import SAMPLE_ROWS, expected_metrics, read_metrics, same, write_rows

SEED = 25
INFER_MARK = "Replacement inference prompt."
MATCH_MARK = "Replacement matcher prompt."


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_default_prompts_hold_no_hint_and_the_scorers_their_examples():
    system, messages = infer_messages("LOG-TEXT", "REQUEST-TEXT")
    user = messages[0]["content"]
    assert "LOG-TEXT" in user and "REQUEST-TEXT" in user and "LOG-TEXT" not in system
    for hint in ("different situations", "override", "later conversations", "situation matches"):
        assert hint not in (system + user).lower()
    assert "<preference>" in user and "<the preference" not in user
    matcher = match_messages(["a?", "b?"], "P")[0]["content"]
    assert matcher.count("\nExample ") == 8 and "exactly 2 results" in matcher
    for label in ("fully covered", "partially covered", "not covered"):
        assert matcher.count(f'"coverage": "{label}"') >= 5
    decomposer = decompose_messages("P")[0]["content"]
    assert decomposer.count("\nAnalysis:") == 5 and "analysis" in decomposer.lower()


def test_overrides_are_read_and_checked(tmp_path):
    reference_style = write(tmp_path / "infer.txt", "## Log\n{interaction_log}\n## Current\n{curr_request}\n")
    settings = BENCHMARK.settings_of({"prompts": {"infer": reference_style}})
    assert check_prompts(settings) == []
    _, messages = infer_messages("LOG", "REQ", settings)
    assert messages[0]["content"] == "## Log\nLOG\n## Current\nREQ\n"
    bad = {"prompts": {"infer": write(tmp_path / "a.txt", "{log} {requst}"),
                       "match": write(tmp_path / "b.txt", "{preference} only"),
                       "judge": write(tmp_path / "c.txt", "{request} { stray"),
                       "matcher": str(tmp_path / "b.txt"),
                       "decompose": str(tmp_path / "missing.txt")}}
    problems = "\n".join(check_prompts(BENCHMARK.settings_of(bad)))
    assert "benchmark.prompts.infer=" in problems and "unknown placeholder(s) {requst}" in problems
    assert "must contain {request}" in problems  # the misspelt placeholder leaves {request} out
    assert "benchmark.prompts.match=" in problems and "must contain {checklist}" in problems
    assert "benchmark.prompts.judge=" in problems and "not a usable template" in problems
    assert "no prompt named 'matcher'" in problems
    assert "benchmark.prompts.decompose=" in problems and "no such file" in problems


def fake_requests(server) -> list[dict]:
    with urllib.request.urlopen(f"{server.anthropic_url}/requests", timeout=5) as response:
        return json.loads(response.read())


def sent_texts(body: dict) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages", []))


@pytest.mark.e2e
def test_prompt_override_by_path_end_to_end(run_cli, fake_server, tmp_path):
    # The fake answers with lines of the prompt: a replacement made mostly of marked sections makes
    # its inferences readable, so this run also walks the decompose and match stages.
    lines = [f"<preference>Variant {k}: answers must put the key figure in the first line.</preference>"
             for k in range(200)]
    infer = write(tmp_path / "my_infer.txt",
                  f"{INFER_MARK}\n{{interaction_log}}\n{{curr_request}}\n" + "\n".join(lines) + "\n")
    match = write(tmp_path / "my_match.txt", MATCH_MARK + "\n" + (PROMPTS / "match.txt").read_text())
    overrides = {"infer": infer, "match": match}
    run_dir, limit = tmp_path / "run", 3
    run_cli("benchmark=cupid", "condition=oracle", "model=fake", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={run_dir}", f"limit={limit}", f"run.seed={SEED}", "run.progress=false",
            *(f"benchmark.prompts.{name}={path}" for name, path in overrides.items()))
    bodies = fake_requests(fake_server)
    infer_sent = [b for b in bodies if INFER_MARK in sent_texts(b)]
    match_sent = [b for b in bodies if MATCH_MARK in sent_texts(b)]
    assert len(infer_sent) == limit and all("Variant 199" in sent_texts(b) for b in infer_sent)
    assert match_sent and all("Example 8" in sent_texts(b) for b in match_sent)
    assert not any("Task: state this user's single most likely preference" in sent_texts(b) for b in bodies)
    assert not any(b.get("response_format") and MATCH_MARK not in sent_texts(b)
                   and "results" in json.dumps(b["response_format"]) for b in bodies)  # every matcher call replaced
    paths = {"unparsable": 0, "empty": 0, "matched": 0}
    expected = expected_metrics(run_dir, "oracle", limit, paths, BENCHMARK.settings_of({"prompts": overrides}), SEED)
    metrics = read_metrics(run_dir)
    for name, want in expected.items():
        assert same(metrics[("oracle", name)], want), (name, metrics[("oracle", name)], want)
    assert paths["matched"] > 0, paths


@pytest.mark.e2e
def test_bad_override_and_bad_rows_are_reported_once_before_any_call(run_cli, fake_server, tmp_path):
    rows = json.loads(json.dumps(SAMPLE_ROWS))
    rows[1]["current_request"] = ""
    rows[3]["current_checklist"] = []
    data = write_rows(tmp_path / "bad.jsonl", rows)
    done = run_cli("-m", "benchmark=cupid", "condition=all", "model=fake", "judge=fake",
                   *fake_server.model_overrides(), f"run.dir={tmp_path / 'run'}", "run.progress=false",
                   "benchmark.data.source=hub", f"benchmark.data.path={data}",
                   f"benchmark.prompts.match={tmp_path / 'nowhere.txt'}", expect_ok=False)
    assert done.returncode != 0
    # the prompt problem and both bad rows in one message, said once for the four conditions
    assert done.stderr.count("benchmark.prompts.match=") == 1 and "no such file" in done.stderr
    assert done.stderr.count("2 bad row(s)") == 1, done.stderr
    assert "row 2: field 'current_request'" in done.stderr and "row 4: field 'current_checklist'" in done.stderr
    assert fake_server.stats()["requests"] == 0
