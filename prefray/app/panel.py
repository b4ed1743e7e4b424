"""`judge=panel(a,b,...)` and `judge.repeats=K`: several verdicts per unit, and their panel.

`judge=panel(a,b)` is the sweep over its judges with `run.panel=true`: each judge scores every unit
(the answers are generated once: a judge is never part of a generation's identity), and aggregation
scores the panel's verdict as one more judge named `panel(a,b)` (engine/results/agreement.py
`panel_rows`) and compares the judges in judge_agreement.csv.

`judge.repeats=K` asks each judge K times: the judge itself, then copies named `NAME~2` … `NAME~K`
whose requests carry the seed moved by a `seed_offset` of their own (same prompt, same temperature;
a repeat is never answered from another's cache entry). The copies form a panel with `run.panel=true`:
judge_agreement.csv gives α across the repeats, and the panel's verdict is their majority (mean).
"""

from __future__ import annotations

import re
from typing import Any

from prefray.app.sweep import SweepError

PANEL = re.compile(r"judge=panel\((?P<members>[^()]*)\)")
REPEATS = re.compile(r"judge\.repeats=(?P<k>\S+)")
SEED_STRIDE = 1_000_003   # between the seeds of two repeats (a unit's samples use seed + 0, 1, 2, ...)


def panel_members(overrides: list[str]) -> list[str] | None:
    """The judges of a `judge=panel(...)` override (None when there is none); SweepError when malformed."""
    found = [PANEL.fullmatch(o.strip()) for o in overrides if o.strip().startswith("judge=panel(")]
    if not found:
        return None
    if len(found) > 1 or found[0] is None:
        raise SweepError("name one panel as judge=panel(a,b,...) with two or more judge options")
    members = [m.strip() for m in found[0]["members"].split(",") if m.strip()]
    if len(members) < 2 or len(set(members)) != len(members):
        raise SweepError(f"judge=panel({found[0]['members']}): a panel is two or more different judge options")
    return members


def panel_overrides(overrides: list[str], multirun: bool) -> tuple[list[str], bool]:
    """`judge=panel(a,b)` → `judge=a,b run.panel=true`, run as a sweep (the panel's judges are its jobs)."""
    members = panel_members(overrides)
    if members is None:
        return overrides, multirun
    rest = [o for o in overrides if not o.strip().startswith("judge=panel(")]
    return [*rest, f"judge={','.join(members)}", "run.panel=true"], True


def split_repeats(overrides: list[str]) -> tuple[list[str], int]:
    """The overrides without `judge.repeats=K`, and K (1 when not given); SweepError when K is no count."""
    found = [REPEATS.fullmatch(o.strip()) for o in overrides]
    counts = [m["k"] for m in found if m]
    rest = [o for o, m in zip(overrides, found) if not m]
    if not counts:
        return overrides, 1
    if len(counts) > 1 or not counts[0].isdigit() or int(counts[0]) < 1:
        raise SweepError(f"judge.repeats={counts[-1]}: give one whole number of repeats, 1 or more")
    return rest, int(counts[0])


def repeated(judge: dict[str, Any], repeats: int) -> list[dict[str, Any]]:
    """The judge's config and its repeats' (named NAME~2 ..., each with its own seed_offset)."""
    return [judge if i == 0 else {**judge, "name": f"{judge['name']}~{i + 1}", "seed_offset": i * SEED_STRIDE}
            for i in range(repeats)]


def with_repeats(configs: list[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """Each job once per repeat of its judge, all in one panel (run.panel); unchanged for 1."""
    if repeats == 1:
        return configs
    return [{**cfg, "judge": judge, "run": {**cfg["run"], "panel": True}}
            for cfg in configs for judge in repeated(cfg["judge"], repeats)]
