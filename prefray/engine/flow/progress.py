"""Live progress per job and in total (rich), shown only on a terminal.

Two ways in, both safe to mix:
- `update(job, stage, finished, total)`: a stage's snapshot (the runner calls it when a stage
  starts and after each shard);
- `record(job, stage, result)`: one finished call (a CallResult or any object with `status`,
  `input_tokens`, `output_tokens`, `cost_usd`, `cached`), so the display advances per call, not
  per shard. A later shard snapshot never moves a count backwards;
- `add_calls(tag, …)`: calls finished at the gateways since the last look, in bulk. During a run,
  `watch_gateways` asks every gateway twice a second for its counts per job and stage (the runner
  tags each batch with CALL_TAG), so rows advance as answers arrive, not when a shard is written.

Each job row and the total row show calls done/total, failures, tokens, dollars, requests/s
(calls answered in this process ÷ time since its first one) and the ETA at that rate. A stage's
units join the total when the stage starts (judge units exist only once answers do).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn


@dataclass
class Tally:
    done: int = 0
    total: int = 0
    failed: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    live_calls: int = 0           # calls answered while this process watched (not resumed ones)
    first_at: float | None = None

    def rate(self, now: float) -> float:
        if self.first_at is None or self.live_calls == 0 or now <= self.first_at:
            return 0.0
        return self.live_calls / (now - self.first_at)

    def eta_s(self, now: float) -> float | None:
        rate = self.rate(now)
        remaining = max(0, self.total - self.done)
        return None if rate == 0 else remaining / rate


@dataclass
class ProgressState:
    """Counts per job and stage; pure (the clock is passed in), so it is testable without a terminal."""

    clock: Callable[[], float] = time.monotonic
    stages: dict[tuple[str, str], Tally] = field(default_factory=dict)

    def update(self, job_key: str, stage: str, finished: int, total: int) -> None:
        """A stage snapshot. Its first one counts stored (resumed) units as done; later increases
        that no `record` call reported count as calls answered now."""
        known = (job_key, stage) in self.stages
        tally = self.stages.setdefault((job_key, stage), Tally())
        tally.total = total
        if known and finished > tally.done:
            tally.live_calls += finished - tally.done
            tally.first_at = self.clock() if tally.first_at is None else tally.first_at
        tally.done = max(tally.done, finished)

    def record(self, job_key: str, stage: str, result: Any) -> None:
        tally = self.stages.setdefault((job_key, stage), Tally())
        now = self.clock()
        tally.done += 1
        tally.total = max(tally.total, tally.done)
        tally.failed += int(getattr(result, "status", "ok") != "ok")
        tally.tokens += int(getattr(result, "input_tokens", 0) or 0) + int(getattr(result, "output_tokens", 0) or 0)
        tally.cost_usd += 0.0 if getattr(result, "cached", False) else float(getattr(result, "cost_usd", 0.0) or 0.0)
        tally.live_calls += 1
        if tally.first_at is None:
            tally.first_at = now

    def add_calls(self, job_key: str, stage: str, done: int, failed: int, tokens: int, cost_usd: float) -> None:
        """Calls that finished at a gateway since the last look (per-call progress, in bulk)."""
        if done <= 0:
            return
        tally = self.stages.setdefault((job_key, stage), Tally())
        tally.done += done
        tally.total = max(tally.total, tally.done)
        tally.failed += failed
        tally.tokens += tokens
        tally.cost_usd += cost_usd
        tally.live_calls += done
        if tally.first_at is None:
            tally.first_at = self.clock()

    def job(self, job_key: str) -> Tally:
        return _merge([t for (key, _), t in self.stages.items() if key == job_key])

    def total(self) -> Tally:
        return _merge(list(self.stages.values()))

    def jobs(self) -> list[str]:
        return sorted({key for key, _ in self.stages})

    def current_stage(self, job_key: str) -> str:
        open_stages = [s for (key, s), t in self.stages.items() if key == job_key and t.done < t.total]
        return open_stages[-1] if open_stages else "done"


def _merge(tallies: list[Tally]) -> Tally:
    out = Tally()
    for t in tallies:
        out.done += t.done
        out.total += t.total
        out.failed += t.failed
        out.tokens += t.tokens
        out.cost_usd += t.cost_usd
        out.live_calls += t.live_calls
        if t.first_at is not None:
            out.first_at = t.first_at if out.first_at is None else min(out.first_at, t.first_at)
    return out


def describe(tally: Tally, now: float) -> dict[str, str]:
    """The row's text fields."""
    eta = tally.eta_s(now)
    return {"failed": f"{tally.failed} failed", "tokens": f"{tally.tokens:,} tok",
            "dollars": f"${tally.cost_usd:.4f}", "rate": f"{tally.rate(now):.1f} req/s",
            "eta": "ETA --" if eta is None else f"ETA {int(eta) // 60}:{int(eta) % 60:02d}"}


def job_key(job: Any) -> str:
    return f"{job.benchmark}/{job.model.name}/{job.condition}"


# The job and stage a batch of calls belongs to (calls/dispatch.py's CALL_TAG), set by the job runner
# around each dispatch and read where the batch is handed to a gateway, which counts finished calls
# per tag as they arrive.
TAG_SEPARATOR = "\x1f"


def call_tag(job: Any, stage: str) -> str:
    return f"{job_key(job)}{TAG_SEPARATOR}{stage}"


async def watch_gateways(gateways: Any, feed: Callable[[str, int, int, int, float], None],
                         every_s: float = 0.5) -> None:
    """Until cancelled: ask each gateway for its per-tag counts and feed the increases."""
    seen: dict[tuple[str, str], list[float]] = {}
    while True:
        await asyncio.sleep(every_s)
        for name, handle in list(getattr(gateways, "handles", {}).items()):
            try:
                counts = await handle.tallies.remote()
            except Exception:  # noqa: BLE001 - a gateway being restarted answers next time
                continue
            for tag, now in counts.items():
                before = seen.get((name, tag), [0, 0, 0, 0.0])
                delta = [max(0, a - b) for a, b in zip(now, before)]
                seen[(name, tag)] = list(now)
                feed(tag, int(delta[0]), int(delta[1]), int(delta[2]), float(delta[3]))


class LiveProgress:
    """The rich display over a ProgressState: one row per job and a total row."""

    def __init__(self, enabled: bool, clock: Callable[[], float] = time.monotonic):
        self.enabled = enabled
        self.state = ProgressState(clock)
        self.tasks: dict[str, Any] = {}
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}")]
        columns += [TextColumn(f"{{task.fields[{name}]}}") for name in ("failed", "tokens", "dollars", "rate", "eta")]
        self.progress = Progress(*columns, disable=not enabled)
        if enabled:
            self._show("\0total", "total", Tally())  # the total row stays on top

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, job: Any, stage: str, finished: int, total: int) -> None:
        self.state.update(job_key(job), stage, finished, total)
        self._refresh(job_key(job))

    def record(self, job: Any, stage: str, result: Any) -> None:
        """Per-call callback: one finished call of `job`'s `stage`."""
        self.state.record(job_key(job), stage, result)
        self._refresh(job_key(job))

    def add_calls(self, tag: str, done: int, failed: int, tokens: int, cost_usd: float) -> None:
        """Per-call feed from the gateways: `tag` is "<job key>\x1f<stage>" (see CALL_TAG)."""
        key, _, stage = tag.partition(TAG_SEPARATOR)
        self.state.add_calls(key, stage, done, failed, tokens, cost_usd)
        self._refresh(key)

    def _show(self, name: str, label: str, tally: Tally) -> None:
        fields = describe(tally, self.state.clock())
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(label, total=max(1, tally.total), **fields)
        self.progress.update(self.tasks[name], description=label, completed=tally.done,
                             total=max(1, tally.total), **fields)

    def _refresh(self, key: str) -> None:
        if not self.enabled:
            return
        self._show(key, f"{key} [{self.state.current_stage(key)}]", self.state.job(key))
        self._show("\0total", "total", self.state.total())
