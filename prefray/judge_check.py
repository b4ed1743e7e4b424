"""`python -m prefray.judge_check ...`: the `prefray judge-check` command (prefray.app.judge_check).

`--help` shows its usage.
"""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `python -m prefray.judge_check *argv` (default: sys.argv[1:]), in this process."""
    return app.main("judge-check", argv)


if __name__ == "__main__":
    sys.exit(app.run("judge-check"))
