"""`prefray rejudge RUN_DIR judge=NAME|judge=panel(A,B,...) [judge.KEY=VALUE ...] [run.KEY=VALUE ...]`

Scores the stored generations of a finished run with another judge without a single generation
call: stages answered by the evaluated model are read from the shards, never sent. Results of
several judges coexist (the judge's name is part of every judge row and metric), and
judge_agreement.csv compares them (percent agreement and Cohen's kappa for yes/no verdicts,
Pearson and Spearman correlations for scores, Krippendorff's alpha). `judge=panel(A,B)` scores with
each judge of the panel and with the panel's verdict; `judge.repeats=K` asks each judge K times
with different seeds and scores their majority too (see prefray/app/panel.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefray.app.commands import Parser, refused
from prefray.app.compose import compose_judge, conf_dir
from prefray.app.panel import panel_members, repeated, split_repeats
from prefray.app.rerun import estimate_then_run, on_run_dir, prepare, run_location
from prefray.app.sweep import SweepError
from prefray.engine.rundir.layout import RunDir
from prefray.engine.sweep import SendPolicy


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("run_dir", type=run_location)
    parser.add_argument("settings", nargs="+", help="judge=NAME, judge.KEY=VALUE and run.KEY=VALUE")
    return parser


def run(args: argparse.Namespace) -> int:
    judge_overrides = [s for s in args.settings if s.startswith("judge=") or s.startswith("judge.")]
    overrides = [s for s in args.settings if s not in judge_overrides]
    try:
        if not any(s.startswith("judge=") for s in judge_overrides):
            raise SweepError("name the new judge: judge=NAME")
        judge_overrides, repeats = split_repeats(judge_overrides)
        members = panel_members(judge_overrides)
        keys = [s for s in judge_overrides if not s.startswith("judge=")]
        judges = [compose_judge(judge_overrides, conf_dir())] if members is None else \
            [compose_judge([f"judge={member}", *keys], conf_dir()) for member in members]
        judge = [copy for one in judges for copy in repeated(one, repeats)]
        if len(judge) > 1:
            overrides = [*overrides, "run.panel=true"]
    except SweepError as exc:
        return refused(exc)
    return on_run_dir(args.run_dir, overrides, lambda run_dir: rejudge(run_dir, args.run_dir, judge, overrides))


def rejudge(run_dir: RunDir, location: Path | str, judge: dict[str, Any] | list[dict[str, Any]],
            overrides: list[str]) -> int:
    try:
        sweep = prepare(run_dir, overrides, SendPolicy(subject_stored_only=True), replace_judge=judge,
                        location=location)
    except SweepError as exc:
        return refused(exc)
    return estimate_then_run(sweep)
