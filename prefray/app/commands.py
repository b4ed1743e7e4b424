"""Every prefray command, and the one way each is run.

A command is a module of `prefray.app` with `parser(prog)` (its arguments, its `--help`) and
`run(args) -> exit code` (the work). `prefray COMMAND ...` (prefray.cli) and its alias, the
module prefray/COMMAND.py run with `-m`, both call `main` for the exit code and `run_cli` around it:

- bad arguments: exit 2 and one line (`PROG: error: ...`), `--help` as argparse prints it;
- a refused sweep or run dir: exit 2, one `prefray: ...` line per problem;
- Ctrl-C: exit 130 and one line (what is stored, how to resume), never a traceback
  (prefray.engine.flow.exits.run_cli, the one runner, which also names the exit codes).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from prefray.engine.rundir.layout import RunDir


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # one line for `prefray --help`
    interrupted: str | None = None  # the line after Ctrl-C, if not the run's (what is stored, how to resume)

    @property
    def module(self):
        """The command's module (imported on first use, so `prefray --help` imports none)."""
        return importlib.import_module(f"prefray.app.{self.name.replace('-', '_')}")


COMMANDS = {command.name: command for command in (
    Command("launch", "plan, check, run and aggregate a sweep"),
    Command("plan", "what a launch with the same overrides would cost (sends nothing)"),
    Command("rerun", "run again the units of a run that ended failed or skipped"),
    Command("rejudge", "score a run's stored generations with another judge"),
    Command("view", "browse a run: metrics, figures, units, transcripts"),
    Command("compare", "pair runs on their shared units: deltas, CIs, paired tests, adjusted p"),
    Command("report", "a run's headline tables in the papers' layouts, as LaTeX or Markdown"),
    Command("compact", "roll a run's small result shards into a few large Parquet files",
            "prefray: compaction interrupted; the job folders compacted before it are complete, the others "
            "unchanged; run the same compact command again to finish"),
    Command("upload", "copy a run directory to object storage",
            "prefray: upload interrupted; the destination may hold part of the run; run the same upload "
            "command again to copy all of it"),
    Command("judge-check", "rate people's labelled items with a judge: Krippendorff's alpha, confusion, bias"),
)}


class OneLineErrors:
    """argparse's parser, refusing bad arguments with one line (its usage is left to --help)."""

    prog: str

    def error(self, message: str):
        from prefray.engine.flow.exits import EXIT_CONFIG

        one_line = message.replace("\n", " ")
        sys.stderr.write(f"{self.prog}: error: {one_line} (--help shows the usage)\n")
        sys.exit(EXIT_CONFIG)


class Parser(OneLineErrors, argparse.ArgumentParser):
    """A command's parser: the module docstring as description, kept as written."""

    def __init__(self, prog: str, description: str | None = None, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=prog, description=description, **kwargs)


def default_prog(name: str) -> str:
    return f"prefray {name}"   # the usage and error lines name the command, however it was started


def main(name: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]) for command `name` and do its work, its log lines shown
    at the level `--quiet`/`--verbose` ask for (prefray.app.display); the exit code."""
    from prefray.app import display

    module = COMMANDS[name].module
    parser = module.parser(prog or default_prog(name))
    display.add_flags(parser)
    try:
        args = parser.parse_intermixed_args(argv)  # e.g. overrides before and after `--csv FILE`
    except SystemExit as exc:  # after --help (0), or after the one line of a refused argument (2)
        return int(exc.code or 0)
    with display.shown(args.log_level):
        return module.run(args)


def run(name: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    """`main` through the one CLI runner: what `prefray NAME` and its module alias exit with (the
    runner's own lines, e.g. after Ctrl-C, shown at the level the flags ask for too)."""
    from prefray.app import display
    from prefray.engine.flow.exits import run_cli

    argv = sys.argv[1:] if argv is None else list(argv)
    with display.shown(display.level_of(argv)):
        return run_cli(lambda: main(name, argv, prog), name, COMMANDS[name].interrupted)


def run_dir_argument(value: str | Path) -> RunDir:
    """A local run directory as a command learns it (its RUN_DIR argument, or run.dir): the one
    RunDir the command passes down. A URI run dir is learned from `staged_run` instead."""
    return RunDir(value)


def run_process(name: str) -> int:
    """`run` as the whole work of this process (`python -m prefray.NAME`): the exit code, or the
    process ends at once when its command returns after starting a local Ray cluster
    (engine/flow/exits.py's end_process)."""
    from prefray.engine.flow.exits import end_process, ends_after_command

    ends_after_command()
    return end_process(run(name))


def refuse(problems: list[str]) -> int:
    """One line per problem, and the 'refused before any call' exit code."""
    from prefray.engine.flow.exits import EXIT_CONFIG

    for problem in problems:
        print(f"prefray: nothing was run: {problem}", file=sys.stderr)
    return EXIT_CONFIG


def refused(exc: Exception) -> int:
    """A refused sweep: one line per schema or preflight problem, else its message on one line."""
    from prefray.app.compose import ConfigProblems
    from prefray.engine.flow.exits import EXIT_CONFIG

    if isinstance(exc, ConfigProblems):
        return refuse(exc.problems)
    print(f"prefray: {str(exc).replace(chr(10), ' ')}", file=sys.stderr)
    return EXIT_CONFIG
