"""`prefray compact` run as a module, its `python -m` alias (prefray.app.compact does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray compact *argv` (default: sys.argv[1:]), in this process."""
    return app.main("compact", argv)


if __name__ == "__main__":
    sys.exit(app.run("compact"))
