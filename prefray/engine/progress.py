"""Live progress per job and stage (rich), shown only on a terminal."""

from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class LiveProgress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tasks: dict[tuple, Any] = {}
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), disable=not enabled)

    def __enter__(self) -> "LiveProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def update(self, job: Any, stage: str, finished: int, total: int) -> None:
        key = (job.benchmark, job.model.name, job.condition, stage)
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task("/".join(key), total=total)
        self.progress.update(self.tasks[key], completed=finished, total=total)
