"""`prefray rejudge` run as a module, its `python -m` alias (prefray.app.rejudge does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray rejudge *argv` (default: sys.argv[1:]), in this process."""
    return app.main("rejudge", argv)


if __name__ == "__main__":
    sys.exit(app.run("rejudge"))
