"""`prefray launch` run as a module, its `python -m` alias (prefray.app.launch does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray launch *argv` (default: sys.argv[1:]), in this process."""
    return app.main("launch", argv)


if __name__ == "__main__":
    sys.exit(app.run_process("launch"))
