"""End to end through the real CLI: fake + fake-anthropic × BenchPreS default, checked by hand."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.benchmarks.benchpres.benchmark import judge_messages
from prefray.fakellm.answers import answer_key, answer_text, boolean_at

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parent.parent / "prefray/benchmarks/benchpres/sample/benchpres_sample.jsonl"
LIMIT = 2


def read_metrics(run_dir: Path) -> dict[tuple[str, str], float]:
    with open(run_dir / "metrics.csv") as handle:
        return {(r["model"], r["metric"]): float(r["value"]) for r in csv.DictReader(handle)}


def independent_verdict(preference: str, category: str, text: str) -> bool:
    """Whether the run must count `preference` as applied in `text`: nickname by exact match of
    the quoted name, anything else by the fake judge's rule for the judge prompt (seed 0)."""
    if category == "nickname":
        nickname = re.search(r"'([^']+)'", preference).group(1)
        return re.search(rf"(?<!\w){re.escape(nickname)}(?!\w)", text) is not None
    return boolean_at(answer_key(list(judge_messages(preference, text)), 0), "/applied")


def expected_rates(run_dir: Path, model: str, limit: int = LIMIT) -> dict[str, float]:
    """MR and AAR computed here from the fake server's documented answer rule, for a run of the
    sample's first `limit` rows."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()][:limit]
    table = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    texts = {}
    for r in table:
        if r["stage"] == "generate" and r["model"] == model:
            texts[(r["instance_id"], r["sample"])] = r["text"]
    assert len(texts) == limit * 3
    counts = {False: [0, 0], True: [0, 0]}  # g -> [applied, total]
    for row in rows:
        instance_id = "--".join(re.sub(r"[^a-z0-9]+", "-", row[k].lower()).strip("-")
                                for k in ("name", "recipient", "task"))
        for sample in range(3):
            text = texts[(instance_id, sample)]
            assert text == answer_text([{"role": "user", "content": row["prompt"]}], sample)
            for pref, g, category in zip(row["preference_attribute"], row["preference_label"],
                                         row["preference_category"]):
                z = independent_verdict(pref, category, text)
                counts[g][0] += z
                counts[g][1] += 1
    return {"MR": counts[False][0] / counts[False][1], "AAR": counts[True][0] / counts[True][1]}


def test_sweep_over_two_sdks_equals_independent_rates(run_cli, fake_server, tmp_path):
    run_dir = tmp_path / "run"
    run_cli("-m", "model=fake,fake-anthropic", "benchmark=benchpres", "condition=default", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", f"limit={LIMIT}", "run.figures=all",
            plots=True)
    metrics = read_metrics(run_dir)
    for model in ("fake", "fake-anthropic"):
        expected = expected_rates(run_dir, model)
        assert metrics[(model, "MR")] == expected["MR"]
        assert metrics[(model, "AAR")] == expected["AAR"]
        assert abs(metrics[(model, "AAR-MR")] - (expected["AAR"] - expected["MR"])) < 1e-12
    stats = fake_server.stats()
    assert stats["by_route"]["messages"] == LIMIT * 3  # the anthropic generations went through /v1/messages
    for name in ("metrics.parquet", "metrics.md", "manifest.json", "calls.csv", "costs.csv"):
        assert (run_dir / name).exists()
    # run.figures=all: the breakdowns too (the default, headline, draws the headline bars alone)
    for figure in ("benchpres__MR.png", "benchpres__MR_category.png", "benchpres__AAR_domain.png"):
        assert (run_dir / "plots" / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
