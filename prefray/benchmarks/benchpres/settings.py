"""BenchPreS's config keys (`benchpres.yaml`, `benchmark.KEY=VALUE`) and its conditions' keys
(`conditions/*.yaml`), each with its rule and default; the files repeat the defaults a user sees
(a test keeps them equal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefray.sdk.settings import (
    BenchmarkSettings,
    ConditionSettings,
    choice,
    key,
    params_key,
    samples_key,
    section,
    text,
)
from prefray.sdk.settings import path as file_path

MEMORY_LAYOUTS = ("knowledge", "tagged")
MEMORY_MODES = ("full", "without_preferences")


@dataclass(frozen=True)
class BenchPresData:
    """Where the instances come from (`benchmark.data.*`)."""

    source: str = key(text(what="sample | hub | cimemories | a hub dataset id owner/name"), "sample",
                      "sample (the project's own set), hub (files at path), cimemories (profiles at path and "
                      "preferences) or a hub dataset id")
    path: str | None = key(file_path().or_null("none"), None, "the hub files, or the CIMemories profile JSON")
    split: str = key(text(), "test", "the split of a hub dataset id")
    preferences: str | None = key(file_path().or_null("none"), None, "the preference file (YAML/JSON) of the "
                                  "cimemories source")


@dataclass(frozen=True)
class BenchPresSettings(BenchmarkSettings):
    data: BenchPresData = section(BenchPresData, "the dataset")
    memory_layout: str = key(choice(*MEMORY_LAYOUTS), "knowledge", "the memory block: knowledge (a headed "
                             "block of remembered statements) or tagged (<memory>…</memory>)")
    samples: int = samples_key(3)
    generation: dict[str, Any] = params_key({"temperature": 1.0, "max_tokens": 1024},
                                            "request parameters of the answers")
    judge_params: dict[str, Any] = params_key({"temperature": 0.0, "max_tokens": 256},
                                              "request parameters of the preference and completeness judges")
    completeness_baseline: str = key(text(what="a condition name"), "no_preferences",
                                     "the condition completeness_delta is taken against")


@dataclass(frozen=True)
class BenchPresCondition(ConditionSettings):
    memory: str = key(choice(*MEMORY_MODES), "full", "the memory block: full, or without its preference "
                      "statements")
    instruction: str | None = key(text(what="a prompt name of the benchmark").or_null("none"), None,
                                  "a prompt appended after the task (prompts/<name>.txt)")
