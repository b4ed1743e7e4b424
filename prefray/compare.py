"""`prefray compare` run as a module, its `python -m` alias (prefray.app.compare does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray compare *argv` (default: sys.argv[1:]), in this process."""
    return app.main("compare", argv)


if __name__ == "__main__":
    sys.exit(app.run("compare"))
