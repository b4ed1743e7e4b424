"""`prefray upload` run as a module, its `python -m` alias (prefray.app.upload does the work)."""

from __future__ import annotations

import sys

from prefray import app


def main(argv: list[str] | None = None) -> int:
    """The exit code of `prefray upload *argv` (default: sys.argv[1:]), in this process."""
    return app.main("upload", argv)


if __name__ == "__main__":
    sys.exit(app.run("upload"))
