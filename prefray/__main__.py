"""`python -m prefray COMMAND ...`: the same as the `prefray` console script."""

import sys

from prefray.cli import console

if __name__ == "__main__":
    sys.exit(console())
