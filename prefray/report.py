"""`python -m prefray.report ...`: the `prefray report` command (prefray.app.report); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.report *argv` (default: sys.argv[1:]), in this process."""
    return app.main("report", argv)


if __name__ == "__main__":
    sys.exit(app.run("report"))
