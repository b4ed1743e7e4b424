"""`--export FILE.html`: the overview as one self-contained file (tables, CIs, figures inlined)."""

from __future__ import annotations

import os
from pathlib import Path

from prefray.view.data import RunData
from prefray.view.pages import overview_html


def export_html(data: RunData, target: Path) -> Path:
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp")
    temp.write_text(overview_html(data, links=False, inline_figures=True), encoding="utf-8")
    os.replace(temp, target)
    return target
