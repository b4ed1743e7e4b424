"""An append-only JSON-lines file for one writer process (the gateways' paid record and answer
journal): one line per record, flushed at once, so a kill loses at most the line being written
(readers skip a line cut short). The file name carries the process id and a random token, so no
two writers, and no writer of a later launch, ever share a file."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from prefray.engine.rundir.diskfull import DiskFull, writing


class AppendLog:
    def __init__(self, folder: Path, name: str):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        self.handle = open(self.path, "a", encoding="utf-8")
        self.full = False

    def write(self, record: dict[str, Any]) -> None:
        """Append one line; a full disk raises DiskFull, now and for every later line of this file
        (a line after a cut one would be read as one broken line)."""
        if self.full:
            raise DiskFull(self.path)
        try:
            with writing(self.path):
                self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                self.handle.flush()
        except DiskFull:
            self.full = True
            raise

    def close(self) -> None:
        try:
            self.handle.close()
        except OSError:
            if not self.full:
                raise
