"""Prompt files, replaceable per stage without code changes.

Every benchmark keeps its prompts as text files in its own `prompts/` folder. A user can replace
any of them for a run with `benchmark.prompts.<name>=PATH` (for example a paper's reference
prompts); `<name>` is the file's stem (`match` for `prompts/match.txt`). A path that does not exist
is a config error, raised before any call.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

from prefray.engine.config.schema import BenchmarkSettings


class PromptError(ValueError):
    """A prompt override that cannot be used (names the key and the path)."""


def prompt_overrides(settings: BenchmarkSettings | None) -> Mapping[str, str | None]:
    """The `benchmark.prompts` of a job's settings (none: no override)."""
    return settings.prompts if settings is not None else {}


def prompt_path(folder: Path, name: str, settings: BenchmarkSettings | None = None) -> Path:
    """The file a stage's prompt `name` is read from: the override if one is set, else the default."""
    override = prompt_overrides(settings).get(name)
    if override in (None, ""):
        return _default_path(str(folder), name)
    path = Path(str(override)).expanduser()
    if not path.is_file():
        raise PromptError(f"benchmark.prompts.{name}={override}: no such file")
    return path


def read_prompt(folder: Path, name: str, settings: BenchmarkSettings | None = None) -> str:
    """The text of prompt `name` (see `prompt_path`)."""
    path = prompt_path(folder, name, settings)
    return _text((str(path), path.stat().st_mtime_ns))


# Stages render a prompt per unit: a file is read once per version, not once per unit.
@cache
def _default_path(folder: str, name: str) -> Path:
    return Path(folder) / f"{name}.txt"


@cache
def _text(version: tuple[str, int]) -> str:
    return Path(version[0]).read_text(encoding="utf-8")


def check_prompt_overrides(folder: Path, settings: BenchmarkSettings | None) -> list[str]:
    """Problems with `benchmark.prompts.*` overrides: unknown names or missing files (empty = fine)."""
    problems = []
    for name, value in prompt_overrides(settings).items():
        if not (Path(folder) / f"{name}.txt").is_file():
            known = ", ".join(sorted(p.stem for p in Path(folder).glob("*.txt")))
            problems.append(f"benchmark.prompts.{name}: no prompt named '{name}' (known: {known})")
        elif value not in (None, "") and not Path(str(value)).expanduser().is_file():
            problems.append(f"benchmark.prompts.{name}={value}: no such file")
    return problems
