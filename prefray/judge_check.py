"""`prefray judge-check` run as a module, its `python -m` alias (prefray.app.judge_check does the work).

`--help` shows its usage.
"""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray judge-check *argv` (default: sys.argv[1:]), in this process."""
    return app.main("judge-check", argv)


if __name__ == "__main__":
    sys.exit(app.run("judge-check"))
