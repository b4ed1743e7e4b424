"""What a command shows while it works: the engine's log lines, shown as the lines they are.

The engine logs (a `logging.getLogger(__name__)` per module, under the `prefray` logger) and never
prints; a command installs `Display` on the `prefray` logger for as long as it runs. A record is shown
as its message alone, on stderr, or on stdout when the record says it is the command's result
(`extra=STDOUT`, prefray.engine.logs). `sys.stderr` is looked up per line, so the lines go above
rich's live progress display (which redirects stderr while it runs) and to a caller's redirection.

Levels: by default the info lines (what was pulled, where the results are, a run's summary), the
warnings and the errors; `--quiet` only warnings and errors; `--verbose` the debug lines too.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = "prefray"
QUIET, DEFAULT, VERBOSE = logging.WARNING, logging.INFO, logging.DEBUG
FLAGS = {"--quiet": QUIET, "--verbose": VERBOSE}


class Display(logging.Handler):
    """Each record's message, one line, on stderr (or stdout for a command's result)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if getattr(record, "stdout", False) else sys.stderr
            stream.write(record.getMessage() + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: a failed line never stops the work
            self.handleError(record)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """`--quiet` and `--verbose`, on every command's parser (its --help lists them)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quiet", dest="log_level", action="store_const", const=QUIET, default=DEFAULT,
                       help="show only warnings and errors")
    group.add_argument("--verbose", dest="log_level", action="store_const", const=VERBOSE,
                       help="show debug lines too")


def level_of(argv: list[str]) -> int:
    """The level the flags in `argv` ask for, before the command's parser reads them (so the lines
    of the one CLI runner, e.g. the interrupt line, follow them too); the last flag wins."""
    chosen = [FLAGS[a] for a in argv if a in FLAGS]
    return chosen[-1] if chosen else DEFAULT


@contextmanager
def shown(level: int = DEFAULT) -> Iterator[None]:
    """The `prefray` logger's records at `level` and above shown by one `Display` while inside;
    the logger's handlers, level and propagation are restored afterwards."""
    logger = logging.getLogger(ROOT)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers = [Display(), *(h for h in saved[0] if not isinstance(h, Display))]
    logger.setLevel(level)
    logger.propagate = False   # shown once, whatever the root logger holds
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])   # setLevel, not `.level =`: it clears the loggers' cached levels
