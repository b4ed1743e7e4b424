"""How the engine says what it does: `logging`, one logger per module (`logging.getLogger(__name__)`),
never `print`. The commands show the records (prefray/app/display.py); a library user configures
`logging` as they like.

A line that belongs on stdout (a command's result: where the metrics are, what a run found) is
logged with `extra=STDOUT`; the display writes every other line to stderr.
"""

STDOUT = {"stdout": True}
