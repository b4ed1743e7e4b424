"""`python -m prefray.rejudge RUN_DIR judge=NAME [judge.KEY=VALUE ...] [run.KEY=VALUE ...]`

Scores the stored generations of a finished run with another judge without a single generation
call: stages answered by the evaluated model are read from the shards, never sent. Results of
several judges coexist (the judge's name is part of every judge row and metric), and
judge_agreement.csv compares them (percent agreement and Cohen's kappa for yes/no verdicts,
Pearson and Spearman correlations for scores).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from prefray.engine.config.sweep import SweepError
from prefray.launch import EXIT_CONFIG, compose_judge, conf_dir
from prefray.rerun import estimate_then_run, on_run_dir, prepare, run_location


def parse_args(argv: list[str] | None) -> tuple[Path | str, list[str], list[str]]:
    parser = argparse.ArgumentParser(prog="python -m prefray.rejudge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=run_location)
    parser.add_argument("settings", nargs="+", help="judge=NAME, judge.KEY=VALUE and run.KEY=VALUE")
    args = parser.parse_args(argv)
    judge = [s for s in args.settings if s.startswith("judge=") or s.startswith("judge.")]
    if not any(s.startswith("judge=") for s in judge):
        raise SweepError("name the new judge: judge=NAME")
    return args.run_dir, judge, [s for s in args.settings if s not in judge]


def main(argv: list[str] | None = None) -> int:
    try:
        location, judge_overrides, overrides = parse_args(argv)
        judge: dict[str, Any] = compose_judge(judge_overrides, conf_dir())
    except SweepError as exc:
        print(f"prefray: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return on_run_dir(location, overrides, lambda run_dir: rejudge(run_dir, location, judge, overrides))


def rejudge(run_dir: Path, location: Path | str, judge: dict[str, Any], overrides: list[str]) -> int:
    try:
        configs, jobs, benchmarks, instances = prepare(run_dir, overrides, replace_judge=judge, location=location)
    except SweepError as exc:
        print(f"prefray: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return estimate_then_run(run_dir, configs, jobs, benchmarks, instances, {"subject_stages_stored_only": True},
                             location)


if __name__ == "__main__":
    sys.exit(main())
