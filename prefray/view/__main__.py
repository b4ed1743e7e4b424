"""`python -m prefray.view ...`: the `prefray view` command (prefray.app.view); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.view *argv` (default: sys.argv[1:]), in this process."""
    return app.main("view", argv)


if __name__ == "__main__":
    sys.exit(app.run("view"))
