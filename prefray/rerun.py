"""`prefray rerun` run as a module, its `python -m` alias (prefray.app.rerun does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray rerun *argv` (default: sys.argv[1:]), in this process."""
    return app.main("rerun", argv)


if __name__ == "__main__":
    sys.exit(app.run_process("rerun"))
