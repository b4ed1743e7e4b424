"""The metric on stored rows made by hand, against a mean computed by hand; the judge parser."""

import json

import pyarrow as pa
import pytest

from prefray.sdk import ParseError

# Collected by the README's `python -m pytest`; skipped, saying how to install it, until the example is.
BENCHMARK = pytest.importorskip(
    "stated_preference", reason="the example benchmark is not installed: "
    "pip install --no-deps -e examples/stated_preference (docs/contributing.md)").BENCHMARK


def row(stage, instance, status="ok", cause="", adheres=None):
    return {"benchmark": "stated_preference", "model": "m", "condition": "stated", "instance_id": instance,
            "sample": 0, "stage": stage, "role": "subject" if stage == "answer" else "judge",
            "judge": "" if stage == "answer" else "j", "status": status, "cause": cause,
            "parsed_json": None if adheres is None else json.dumps(float(adheres))}


def test_adherence_is_the_mean_over_scored_answers_with_failures_counted():
    rows = pa.Table.from_pylist([
        row("answer", "a"), row("judge", "a", adheres=True),
        row("answer", "b"), row("judge", "b", adheres=False),
        row("answer", "c"), row("judge", "c", "failed", "parse_error"),  # the judge's failure: left out
        row("answer", "d", "failed", "context_overflow"),                 # the model's failure: scores 0
        row("answer", "e", "failed", "timeout"),                          # no answer: left out
    ])
    metrics = {r["metric"]: r for r in BENCHMARK.metrics(rows, {}).to_pylist()}
    # scored: a = 1, b = 0, d = 0 (model failure) -> 1/3 over 3 answers; c and e excluded
    assert (metrics["adherence"]["value"], metrics["adherence"]["n"], metrics["adherence"]["excluded"]) == (1 / 3, 3, 2)
    assert metrics["adherence"]["judge"] == "j"
    assert [(metrics[m]["value"], metrics[m]["n"]) for m in ("failures_model", "failures_judge",
                                                              "failures_no_answer")] == [(1.0, 5), (1.0, 5), (1.0, 5)]


def test_the_judge_answer_is_parsed_or_refused():
    assert BENCHMARK.parse('{"adheres": true}') == 1.0 and BENCHMARK.parse('{"adheres": false}') == 0.0
    for text in ("yes", '{"adheres": "yes"}', "[]"):
        with pytest.raises(ParseError):
            BENCHMARK.parse(text)
