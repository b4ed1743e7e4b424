"""`prefray COMMAND ...` — every prefray command under one name (also `python -m prefray COMMAND ...`).

`prefray COMMAND --help` shows a command's usage; the module prefray/COMMAND.py, run with `-m`, is an alias.
"""

from __future__ import annotations

import argparse
import sys

from prefray import app

PROG = "prefray"


class CommandsHelp(argparse.RawDescriptionHelpFormatter):
    """argparse's help, with the column of the summaries after the longest command name (argparse
    measures the names one indent short, so a name longer than 9 characters pushed its summary down)."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        for sub in getattr(action, "_get_subactions", list)():
            width = len(self._format_action_invocation(sub)) + self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, width)


def parser() -> argparse.ArgumentParser:
    """The top-level parser: its --help lists the commands, one line each."""
    parser = app.commands.Parser(PROG, __doc__, formatter_class=CommandsHelp)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in app.COMMANDS.values():
        commands.add_parser(command.name, help=command.summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray *argv` (default: sys.argv[1:]), in this process."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in app.COMMANDS:
        return app.main(argv[0], argv[1:], prog=f"{PROG} {argv[0]}")
    top = parser()
    try:
        if not argv:
            top.error(f"name a command: {', '.join(app.COMMANDS)}")
        top.parse_args(argv[:1])  # --help, or one line naming an unknown command
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def console() -> int:
    """The `prefray` console script: `main` through the one CLI runner (Ctrl-C: one line, exit 130);
    the process ends at once after a launch that started its own Ray cluster (exits.end_process)."""
    argv = sys.argv[1:]
    from prefray.app import display
    from prefray.engine.flow.exits import end_process, ends_after_command, run_cli

    ends_after_command()
    command = app.COMMANDS.get(argv[0] if argv else "")
    with display.shown(display.level_of(argv)):
        code = run_cli(lambda: main(argv), command.name if command else PROG, command and command.interrupted)
    return end_process(code)
