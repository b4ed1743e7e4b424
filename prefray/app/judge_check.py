"""`prefray judge-check LABELS benchmark=NAME judge=NAME [judge.KEY=VALUE] [run.KEY=VALUE] ...`

Checks a judge against people. LABELS is a CSV or JSONL file of items people labelled, in the
benchmark's terms (its input columns, then one column per annotator; the benchmark's README gives
the format, and each supported benchmark ships a sample). The judge option rates exactly those
items through the engine, as a run whose only stages are the judge's (response cache, budget,
limits, ledger and resume as for any run; no generation call). Printed, and written to RUN_DIR:

- Krippendorff's α between the judge and the human majority, and among the humans, each with a
  bootstrap CI over items, at the labels' level of measurement (judge_check.csv);
- items per (human majority, judge) label, and the judge's bias per label (judge_check_labels.csv).

Items without a human majority or without a judge verdict are counted and named in the report.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefray.app.commands import Parser, refuse, refused, run_dir_argument
from prefray.app.compose import checked_jobs, compose_configs, conf_dir, load_benchmarks, run_dir_of
from prefray.app.sweep import SweepError, expand
from prefray.engine.benchmark import Benchmark
from prefray.engine.rundir.layout import RunDir

LEVELS = ("nominal", "ordinal", "interval")
RESAMPLES = 1000   # bootstrap draws for each α's interval
ALPHA_FILE, LABELS_FILE = "judge_check.csv", "judge_check_labels.csv"


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("labels", type=Path, help="the labels file (.csv or .jsonl)")
    parser.add_argument("settings", nargs="+", help="benchmark=NAME judge=NAME, and judge.KEY=VALUE, "
                                                    "benchmark.KEY=VALUE, run.KEY=VALUE settings")
    parser.add_argument("--level", choices=LEVELS, help="level of measurement (default: the benchmark's)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap draws (default {RESAMPLES})")
    return parser


class CheckRun(Benchmark):
    """The benchmark as a judge check runs it: the labelled groups are its instances, the judge's
    stages its only stages; its metrics are the check's report (written by the command), not
    metrics.csv. The other hooks keep the base class's defaults."""

    def __init__(self, name: str, check: Any, groups: Sequence[Any]):
        self.name, self.check, self.groups = name, check, groups

    def load(self, job) -> Sequence[Any]:
        return self.groups

    def stages(self, job):
        return self.check.stages(job)

    def metrics(self, rows, settings):
        from prefray.engine.benchmark import METRIC_SCHEMA

        return METRIC_SCHEMA.empty_table()


def compose(settings: list[str]) -> list[dict[str, Any]]:
    """The one job's config; the judge also stands in as the evaluated model, which is never called."""
    for group in ("benchmark", "judge"):
        if not any(s.startswith(f"{group}=") for s in settings):
            raise SweepError(f"name the {group}: {group}=NAME")
    if any(s.startswith(("model=", "condition=", "-m")) for s in settings):
        raise SweepError("a judge check takes no model= or condition=: only the judge is called")
    configs = compose_configs(expand(settings, conf_dir(), multirun=False), conf_dir())
    return [{**cfg, "model": dict(cfg["judge"])} for cfg in configs]


def run(args: argparse.Namespace) -> int:
    from prefray.engine.benchmark import DataError
    from prefray.engine.judgecheck import read_labels

    try:
        configs = compose(args.settings)
        jobs = checked_jobs(configs, conf_dir())
        name = jobs[0].benchmark
        check = load_benchmarks(configs)[name].judge_check
        if check is None:
            raise SweepError(f"benchmark {name} declares no judge check ({_with_checks()} do)")
        run_dir = run_dir_of(configs)
        if not isinstance(run_dir, Path):
            raise SweepError("a judge check runs in a local run.dir")
    except SweepError as exc:
        return refused(exc)
    if args.resamples < 0:
        return refuse([f"--resamples {args.resamples}: a number of draws is 0 or more"])
    try:
        groups, annotators = read_labels(args.labels, check)
    except DataError as exc:
        return refuse([str(exc)])
    problems = [f"{args.labels}: {problem}" for problem in check.problems(groups)]
    if problems:
        return refuse(problems)
    return check_judge(run_dir_argument(run_dir), configs, jobs, CheckRun(name, check, groups), annotators,
                       args.level or check.level, args.resamples)


def check_judge(run_dir: RunDir, configs, jobs, benchmark: CheckRun, annotators: list[str], level: str,
                resamples: int) -> int:
    from prefray.app.preflight import preflight
    from prefray.app.rerun import estimate_then_run

    instances, errors = preflight(jobs, {benchmark.name: benchmark})
    if errors:
        return refuse(errors)
    from prefray.app.compose import sweep_of
    from prefray.engine.flow.exits import EXIT_CONFIG

    code = estimate_then_run(sweep_of(configs, jobs, {benchmark.name: benchmark}, instances, run_dir))
    if code == EXIT_CONFIG:
        return code   # refused before anything ran (the run dir is another run's)
    report = judge_report(run_dir, jobs[0], benchmark, annotators, level, resamples)
    print_report(report, jobs[0], benchmark, annotators, run_dir)
    write_report(report, jobs[0], run_dir)
    return code


def judge_report(run_dir: RunDir, job, benchmark: CheckRun, annotators: list[str], level: str, resamples: int):
    import pyarrow.dataset as ds

    from prefray.engine.results.human_agreement import Rated, check_judge
    from prefray.engine.rundir.shards import latest_attempts, read_rows

    judge = job.roles["judge"].name
    rows = latest_attempts(read_rows(run_dir, (ds.field("benchmark") == benchmark.name) & (ds.field("judge") == judge)))
    verdicts = benchmark.check.verdicts(rows, benchmark.groups)
    rated = [Rated(item.item, [item.labels[a] for a in annotators], verdicts.get(item.item))
             for group in benchmark.groups for item in group.items]
    return check_judge(rated, level, resamples, seed=job.seed)


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _undefined(alpha) -> str:
    """The draws where α was undefined (every value alike), left out of the interval."""
    return f", {alpha.undefined_resamples} undefined and left out" if alpha.undefined_resamples else ""


def _label_names(check: Any) -> dict[float, str]:
    names: dict[float, str] = {}
    for label, value in check.labels.items():
        names.setdefault(value, label)
    return names


def print_report(report, job, benchmark: CheckRun, annotators: list[str], run_dir: RunDir) -> None:
    names = _label_names(benchmark.check)
    show = lambda v: names.get(v, f"{v:g}")  # noqa: E731
    judge = job.role_model(benchmark.check.role).name
    print(f"\njudge check: {benchmark.name} {benchmark.check.judged}; judge {judge}; "
          f"{report.items} items, {len(annotators)} annotators, level {report.level}")
    for label, alpha in (("judge vs human majority", report.judge_vs_majority), ("among humans", report.humans)):
        print(f"  Krippendorff's alpha, {label}: {_number(alpha.alpha)} "
              f"(95% CI {_number(alpha.ci_low)} to {_number(alpha.ci_high)}; {alpha.units} items, "
              f"bootstrap over items, {alpha.resamples} draws{_undefined(alpha)})")
    print(f"  paired items {report.paired}; left out: {report.no_majority} without a human majority, "
          f"{report.no_verdict} without a judge verdict")
    if report.mean_difference is not None:
        print(f"  mean judge - majority: {report.mean_difference:+.3f}")
    if report.labels:
        print("  label            human  judge  agree  bias    recall")
        for lab in report.labels:
            print(f"  {show(lab.label):<16} {lab.human_n:>5}  {lab.judge_n:>5}  {lab.agree:>5}  "
                  f"{lab.bias:+.3f}  {_number(lab.recall)}")
        print("  confusion (rows: human majority, columns: judge):")
        values = [lab.label for lab in report.labels]
        print("  " + " " * 16 + "".join(f"{show(v):>12}" for v in values))
        for human in values:
            print(f"  {show(human):<16}" + "".join(f"{report.confusion.get((human, j), 0):>12}" for j in values))
    print(f"  written: {run_dir / ALPHA_FILE}, {run_dir / LABELS_FILE}")


def write_report(report, job, run_dir: RunDir) -> None:
    """judge_check.csv (one row per α) and judge_check_labels.csv (per label bias and confusion counts)."""
    judge = job.roles["judge"].name
    with (run_dir / ALPHA_FILE).open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["benchmark", "judge", "comparison", "level", "alpha", "ci_low", "ci_high", "units", "values",
                      "resamples", "undefined_resamples", "items", "no_majority", "no_verdict", "mean_difference"])
        for comparison, alpha in (("judge_vs_majority", report.judge_vs_majority), ("humans", report.humans)):
            out.writerow([job.benchmark, judge, comparison, report.level, alpha.alpha, alpha.ci_low, alpha.ci_high,
                          alpha.units, alpha.values, alpha.resamples, alpha.undefined_resamples, report.items,
                          report.no_majority, report.no_verdict, report.mean_difference])
    with (run_dir / LABELS_FILE).open("w", newline="") as handle:
        out = csv.writer(handle)
        values = [lab.label for lab in report.labels]
        out.writerow(["benchmark", "judge", "label", "human_n", "judge_n", "agree", "bias", "recall",
                      *(f"judge_{v:g}" for v in values)])
        for lab in report.labels:
            out.writerow([job.benchmark, judge, lab.label, lab.human_n, lab.judge_n, lab.agree, lab.bias, lab.recall,
                          *(report.confusion.get((lab.label, v), 0) for v in values)])


def _with_checks() -> str:
    """The installed benchmarks that declare a judge check, for the refusal's line."""
    from prefray.app import catalog

    found = []
    for name in catalog.names():
        try:
            if catalog.load(name).judge_check is not None:
                found.append(name)
        except Exception:  # noqa: BLE001 - a plugin that does not load is left out of a hint
            continue
    return ", ".join(found) or "none installed"
