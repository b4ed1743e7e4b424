"""`python -m prefray.compact ...`: the `prefray compact` command (prefray.app.compact); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.compact *argv` (default: sys.argv[1:]), in this process."""
    return app.main("compact", argv)


if __name__ == "__main__":
    sys.exit(app.run("compact"))
