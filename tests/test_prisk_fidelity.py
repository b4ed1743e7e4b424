"""PRISK against the paper: prompts and settings that move published numbers."""

from __future__ import annotations

import re

from prefray.benchmarks.prisk.pipeline import PROMPTS
from prefray.engine.prompts import read_prompt


def test_usefulness_prompt_has_no_default_verdict():
    text = read_prompt(PROMPTS, "useful")
    assert not re.search(r"in doubt|if unsure|when uncertain", text, flags=re.IGNORECASE)
    assert "no default either way" in text
