"""`python -m prefray.rejudge ...`: the `prefray rejudge` command (prefray.app.rejudge); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.rejudge *argv` (default: sys.argv[1:]), in this process."""
    return app.main("rejudge", argv)


if __name__ == "__main__":
    sys.exit(app.run("rejudge"))
