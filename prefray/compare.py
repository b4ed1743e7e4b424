"""`python -m prefray.compare ...`: the `prefray compare` command (prefray.app.compare); `--help` shows its usage."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.compare *argv` (default: sys.argv[1:]), in this process."""
    return app.main("compare", argv)


if __name__ == "__main__":
    sys.exit(app.run("compare"))
