"""`python -m prefray.launch ...`: the `prefray launch` command (prefray.app.launch); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.launch *argv` (default: sys.argv[1:]), in this process."""
    return app.main("launch", argv)


if __name__ == "__main__":
    sys.exit(app.run("launch"))
