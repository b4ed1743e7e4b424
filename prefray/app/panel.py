"""`judge=panel(a,b,...)`: a judge panel, as the sweep over its judges with `run.panel=true`.

Each judge scores every unit (the units' answers are generated once: a judge is never part of a
generation's identity); aggregation scores the panel's verdict as one more judge named `panel(a,b)`
(engine/results/agreement.py `panel_rows`) and compares the judges in judge_agreement.csv.
"""

from __future__ import annotations

import re

from prefray.engine.config.sweep import SweepError

PANEL = re.compile(r"judge=panel\((?P<members>[^()]*)\)")


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
