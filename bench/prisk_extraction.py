"""PRISK's answer extraction on its labelled set (prefray/benchmarks/prisk/sample/extraction_labels.jsonl):
hits / total, misreads (a wrong reading, or any reading of an answer that has none), unparsed answers
whose gold exists, misreads among answers that reject an option, and the rows of each, per class.

`--old REV` also scores `prefray/benchmarks/prisk/extraction.py` as it was at git revision REV
(the extractor before this labelled set: 2a027f7).

Usage: python bench/prisk_extraction.py [--old 2a027f7] [--rows]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from _common import ROOT

from prefray.benchmarks.prisk import extraction
from prefray.benchmarks.prisk.extraction_labels import load_labels, report, score_labels, summary


def module_at(rev: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:prefray/benchmarks/prisk/extraction.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "extraction_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("extraction_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def show(name: str, module: ModuleType, rows: list[dict], detail: bool) -> None:
    score = score_labels(rows, module.extract_number, module.extract_choice)
    print("\n".join(report(name, score, rows, module.extract_number, module.extract_choice, detail)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="also score extraction.py at this git revision")
    parser.add_argument("--rows", action="store_true", help="print every missed row")
    args = parser.parse_args()
    rows = load_labels()
    print(summary(rows))
    show("current", extraction, rows, args.rows)
    if args.old:
        show(f"at {args.old}", module_at(args.old), rows, args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
