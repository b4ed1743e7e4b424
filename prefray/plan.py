"""`python -m prefray.plan ...`: the `prefray plan` command (prefray.app.plan); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.plan *argv` (default: sys.argv[1:]), in this process."""
    return app.main("plan", argv)


if __name__ == "__main__":
    sys.exit(app.run("plan"))
