"""`prefray judge-check`: a judge against people (human majority, confusion, bias) and the labels file.

The comparison is tested on hand-worked items; the command on CUPID's shipped sample with the fake
judge, whose α is recomputed here from the stored matcher answers and the file.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from prefray.benchmarks.benchpres.judge_check import PREFERENCE_JUDGE_CHECK
from prefray.benchmarks.cupid.judge_check import MATCHER_CHECK
from prefray.benchmarks.prisk.judge_check import IRP_JUDGE_CHECK
from prefray.engine.benchmark import DataError
from prefray.engine.judgecheck import read_labels
from prefray.engine.results.alpha import krippendorff_alpha
from prefray.engine.results.human_agreement import Rated, check_judge, majority
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import latest_attempts, read_rows
from tests.conftest import ROOT, command_here
from tests.test_agreement import pairwise_alpha

SAMPLE = ROOT / "prefray" / "benchmarks" / "cupid" / "sample" / "judge_check_matcher.csv"
BENCHPRES_SAMPLE = ROOT / "prefray" / "benchmarks" / "benchpres" / "sample" / "judge_check_preference.csv"


def test_majority_rules():
    assert majority([1, 1, 0], "nominal") == 1
    assert majority([1, 0, None], "nominal") is None              # 1 + 1: a tie
    assert majority([0.5, 0.5, 1, 0], "ordinal") == 0.5           # 2 against 1 + 1
    assert majority([1, 1, 0, 0], "ordinal") is None
    assert majority([None, None], "ordinal") is None
    assert majority([1, 2, None, 4], "interval") == pytest.approx(7 / 3)


def test_check_judge_hand_worked():
    rated = [Rated("a", [1, 1, 0], 1), Rated("b", [0, 0, 0], 1), Rated("c", [1, 0, None], 0),
             Rated("d", [0, 0, 1], None), Rated("e", [1, 1, 1], 1)]
    report = check_judge(rated, "nominal", resamples=100)
    # c has no majority; d has no verdict; a, b, e are paired: (human 1, judge 1) x2, (0, 1) x1
    assert (report.items, report.no_majority, report.no_verdict, report.paired) == (5, 1, 1, 3)
    assert report.confusion == {(0, 1): 1, (1, 1): 2}
    by_label = {lab.label: lab for lab in report.labels}
    assert (by_label[0].human_n, by_label[0].judge_n, by_label[0].agree) == (1, 0, 0)
    assert by_label[0].bias == pytest.approx(-1 / 3) and by_label[0].recall == 0
    assert (by_label[1].human_n, by_label[1].judge_n, by_label[1].agree, by_label[1].recall) == (2, 3, 2, 1)
    assert by_label[1].bias == pytest.approx(1 / 3)
    # judge vs majority over a, b, d, e: values 1,1 | 1,0 | -,0 | 1,1 -> o11 = 4, o10 = o01 = 1, n1 = 5, n0 = 1,
    # n = 6: alpha = 1 - 5 * 2 / (2 * 5 * 1) = 0
    assert report.judge_vs_majority.alpha == pytest.approx(0.0)
    assert report.judge_vs_majority.units == 3
    humans = np.array([[1, 0, 1, 0, 1], [1, 0, 0, 0, 1], [0, 0, np.nan, 1, 1]], dtype=float)
    assert report.humans.alpha == pytest.approx(pairwise_alpha(humans, "nominal"))
    assert report.mean_difference is None          # nominal: no direction


def test_check_judge_ordered_levels_report_the_mean_difference():
    rated = [Rated("a", [1, 1, 0.5], 0.5), Rated("b", [0, 0, 0.5], 0.5), Rated("c", [0.5, 0.5, 1], 1)]
    report = check_judge(rated, "ordinal", resamples=0)
    assert report.mean_difference == pytest.approx((-0.5 + 0.5 + 0.5) / 3)
    interval = check_judge([Rated("a", [1, 3], 2.5), Rated("b", [4, 4], 3)], "interval", resamples=0)
    assert interval.mean_difference == pytest.approx((0.5 - 1) / 2) and interval.confusion == {}


def test_sample_file_reads_as_checklists():
    groups, annotators = read_labels(SAMPLE, MATCHER_CHECK)
    assert annotators == ["annotator_1", "annotator_2", "annotator_3"]
    assert [len(g.items) for g in groups] == [3, 3, 4, 3, 3, 4]
    assert groups[0].items[0].item == "p1#1" and groups[0].items[0].labels["annotator_3"] == 1.0
    assert groups[5].items[1].labels["annotator_3"] is None       # an empty cell: no label
    assert MATCHER_CHECK.problems(groups) == []


@pytest.mark.parametrize(("text", "message"), [
    ("pair_id,preference,annotator_1\np1,x,fully\n", "missing input column(s) entry"),
    ("pair_id,preference,entry\np1,x,y\n", "no annotator column"),
    ("pair_id,preference,entry,a1\np1,x,y,mostly\n", ":2: column a1: 'mostly' is not a label"),
    ("pair_id,preference,entry,a1\np1,x,,fully\n", ":2: empty input column(s) entry"),
])
def test_bad_labels_files_are_refused_with_one_line(tmp_path, text, message):
    path = tmp_path / "labels.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_labels(path, MATCHER_CHECK)


def test_jsonl_labels_and_disagreeing_preferences(tmp_path):
    path = tmp_path / "labels.jsonl"
    rows = [{"pair_id": "p", "preference": "x", "entry": "e1", "ann": 1},
            {"pair_id": "p", "preference": "y", "entry": "e2", "ann": None}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    groups, annotators = read_labels(path, MATCHER_CHECK)
    assert annotators == ["ann"] and groups[0].items[1].labels == {"ann": None}
    assert MATCHER_CHECK.problems(groups) == ["pair_id p: its rows give 2 different preferences"]


def test_refusals_come_before_any_call(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("pair_id,preference,entry,a1\np1,x,y,mostly\n")
    done = command_here("judge-check", str(bad), "benchmark=cupid", "judge=fake", f"run.dir={tmp_path / 'r'}",
                        forbid_ray=True)
    assert done.returncode == 2 and "'mostly' is not a label" in done.stderr and not (tmp_path / "r").exists()
    done = command_here("judge-check", str(SAMPLE), "judge=fake", forbid_ray=True)
    assert done.returncode == 2 and "benchmark=NAME" in done.stderr
    done = command_here("judge-check", str(SAMPLE), "benchmark=prisk_sycophancy", "judge=fake", forbid_ray=True)
    assert done.returncode == 2 and "declares no judge check" in done.stderr


@pytest.mark.e2e
def test_judge_check_on_the_cupid_sample_with_the_fake_judge(tmp_path, ray_address, fake_server):
    run_dir = tmp_path / "check"
    args = [str(SAMPLE), "benchmark=cupid", "judge=fake", f"judge.base_url={fake_server.openai_url}",
            f"run.dir={run_dir}", "run.plots=false", "--resamples", "200"]
    done = command_here("judge-check", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Krippendorff's alpha, judge vs human majority:" in done.stdout and "95% CI" in done.stdout
    stats = fake_server.stats()
    assert set(stats["by_model"]) == {"fake-judge"}            # the matcher only: no generation call
    calls = sum(stats["by_model"].values())
    assert calls >= 6                                           # one call per checklist (+ any rematch)

    # recompute the alpha of the judge against the majority from the stored answers and the file
    rows = latest_attempts(read_rows(RunDir(run_dir), ds.field("stage") == "match")).to_pylist()
    scores = {row["instance_id"]: json.loads(row["parsed_json"])["scores"] for row in rows}
    with SAMPLE.open() as handle:
        table = list(csv.DictReader(handle))
    value = {"fully": 1.0, "partially": 0.5, "not": 0.0}
    judge, human, position = [], [], {}
    for row in table:
        k = position[row["pair_id"]] = position.get(row["pair_id"], -1) + 1
        labels = [value[row[a]] for a in ("annotator_1", "annotator_2", "annotator_3") if row[a]]
        top = max(set(labels), key=labels.count)
        if labels.count(top) > len(labels) / 2 or (len(labels) == 2 and labels[0] == labels[1]):
            judge.append(scores[row["pair_id"]][k])
            human.append(top)
    expected = krippendorff_alpha([judge, human], "ordinal")
    with (run_dir / "judge_check.csv").open() as handle:
        written = {r["comparison"]: r for r in csv.DictReader(handle)}
    assert float(written["judge_vs_majority"]["alpha"]) == pytest.approx(expected)
    assert int(written["judge_vs_majority"]["no_majority"]) == 20 - len(judge)
    assert float(written["judge_vs_majority"]["ci_low"]) <= expected <= float(written["judge_vs_majority"]["ci_high"])
    assert f"{expected:.3f}" in done.stdout
    assert (run_dir / "judge_check_labels.csv").exists()

    # the same check again: every answer is stored, nothing is sent
    again = command_here("judge-check", *args)
    assert again.returncode == 0 and sum(fake_server.stats()["by_model"].values()) == calls


def test_benchpres_sample_reads_one_pair_per_row(tmp_path):
    groups, annotators = read_labels(BENCHPRES_SAMPLE, PREFERENCE_JUDGE_CHECK)
    assert len(groups) == 12 and annotators == ["annotator_1", "annotator_2", "annotator_3"]
    assert groups[0].items[0].labels == {"annotator_1": 1.0, "annotator_2": 1.0, "annotator_3": 1.0}
    assert PREFERENCE_JUDGE_CHECK.problems(groups) == []
    twice = tmp_path / "twice.csv"
    twice.write_text("item_id,preference,response,a\nx,p,r,yes\nx,p,r2,no\n")
    assert PREFERENCE_JUDGE_CHECK.problems(read_labels(twice, PREFERENCE_JUDGE_CHECK)[0]) == \
        ["item_id x: 2 rows (one row per item_id)"]


@pytest.mark.e2e
def test_judge_check_on_the_benchpres_sample(tmp_path, ray_address, fake_server):
    run_dir = tmp_path / "check"
    done = command_here("judge-check", str(BENCHPRES_SAMPLE), "benchmark=benchpres", "judge=fake",
                        f"judge.base_url={fake_server.openai_url}", f"run.dir={run_dir}", "run.plots=false",
                        "--resamples", "100")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = latest_attempts(read_rows(RunDir(run_dir), ds.field("stage") == "judge")).to_pylist()
    applied = {row["instance_id"]: float(json.loads(row["parsed_json"])["applied"]) for row in rows}
    with BENCHPRES_SAMPLE.open() as handle:
        table = list(csv.DictReader(handle))
    value = {"yes": 1.0, "no": 0.0}
    judge, human = [], []
    for row in table:
        labels = [value[row[a]] for a in ("annotator_1", "annotator_2", "annotator_3") if row[a]]
        judge.append(applied[row["item_id"]])
        human.append(max(set(labels), key=labels.count))     # no ties in this file
    with (run_dir / "judge_check.csv").open() as handle:
        written = {r["comparison"]: r for r in csv.DictReader(handle)}
    assert float(written["judge_vs_majority"]["alpha"]) == pytest.approx(krippendorff_alpha([judge, human]))
    assert set(fake_server.stats()["by_model"]) == {"fake-judge"}


def test_prisk_irp_sample_reads_with_an_empty_context_and_verdicts_come_from_ok_rows():
    path = ROOT / "prefray" / "benchmarks" / "prisk" / "sample" / "judge_check_irp.csv"
    groups, annotators = read_labels(path, IRP_JUDGE_CHECK)
    assert len(groups) == 8 and groups[0].items[0].inputs["context"] == ""      # the query alone
    assert groups[7].items[0].labels == {"annotator_1": 5.0, "annotator_2": 4.0, "annotator_3": None}
    rows = pa.Table.from_pylist([
        {"stage": "irp_judge", "status": "ok", "instance_id": "i1", "parsed_json": '{"score": 4}'},
        {"stage": "irp_judge", "status": "failed", "instance_id": "i2", "parsed_json": None}])
    assert IRP_JUDGE_CHECK.verdicts(rows, groups) == {"i1#1": 4.0}
