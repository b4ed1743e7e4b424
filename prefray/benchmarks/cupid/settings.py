"""CUPID's config keys (`cupid.yaml`, `benchmark.KEY=VALUE`) and its conditions' keys
(`conditions/*.yaml`), each with its rule and default; the files repeat the defaults a user sees
(a test keeps them equal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefray.sdk.settings import (
    BenchmarkSettings,
    ConditionSettings,
    Rule,
    boolean,
    choice,
    key,
    params_key,
    role_key,
    section,
    text,
)
from prefray.sdk.settings import path as file_path

HISTORIES = ("all", "oracle", "none")
TASKS = ("inference", "generation")


@dataclass(frozen=True)
class CupidData:
    """Where the instances come from (`benchmark.data.*`)."""

    source: str = key(choice("sample", "hub"), "sample", "sample (the project's own set) or hub (kixlab/CUPID)")
    path: str | None = key(file_path().or_null("none"), None,
                           "hub: a Parquet/JSON/JSONL file of the split, or the hub id (datasets library)")
    split: str = key(text(), "test", "the split of the hub dataset")


@dataclass(frozen=True)
class CupidRoles:
    """Scorer roles: a model option each (null: the sweep's judge)."""

    decomposer: str | None = role_key("turns an inferred preference into a checklist")
    matcher: str | None = role_key("rates checklist items against a preference (e.g. prefmatcher-7b)")


def _temperature_0(max_tokens: int, doc: str) -> Any:
    return params_key({"temperature": 0.0, "max_tokens": max_tokens}, doc)


@dataclass(frozen=True)
class CupidParams:
    """Request parameters per stage (overlaid on the answering model's own)."""

    inference: dict[str, Any] = _temperature_0(1024, "infer")
    generation: dict[str, Any] = _temperature_0(2048, "generate")
    summary: dict[str, Any] = _temperature_0(400, "summarize")
    decomposer: dict[str, Any] = _temperature_0(1024, "decompose")
    matcher: dict[str, Any] = _temperature_0(2048, "match and rematch")
    judge: dict[str, Any] = _temperature_0(2048, "judge")


@dataclass(frozen=True)
class CupidSettings(BenchmarkSettings):
    samples: int = key(Rule("1 (CUPID asks one answer per instance)", lambda v: v == 1 and v is not True), 1,
                       "answers asked per unit")
    data: CupidData = section(CupidData, "the dataset")
    roles: CupidRoles = section(CupidRoles, "scorer roles")
    params: CupidParams = section(CupidParams, "request parameters per stage")


def _tasks(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(task in TASKS for task in value)


@dataclass(frozen=True)
class CupidCondition(ConditionSettings):
    history: str = key(choice(*HISTORIES), "all", "the prior sessions shown: all 8, the oracle ones, or none")
    tasks: list[str] = key(Rule(f"a non-empty list of {' | '.join(TASKS)}", _tasks), list(TASKS),
                           "what the condition asks: inference, generation or both")
    reveal_preference: bool = key(boolean(), False, "the answer is written given the true preference")
    summarize: bool = key(boolean(), False, "each prior session is first summarized by the evaluated model")


