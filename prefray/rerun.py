"""`python -m prefray.rerun ...`: the `prefray rerun` command (prefray.app.rerun); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.rerun *argv` (default: sys.argv[1:]), in this process."""
    return app.main("rerun", argv)


if __name__ == "__main__":
    sys.exit(app.run("rerun"))
