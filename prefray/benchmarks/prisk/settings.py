"""PRISK's config keys (`prisk_irp.yaml`, `prisk_narrowing.yaml`, `prisk_sycophancy.yaml`,
`benchmark.KEY=VALUE`) and its conditions' keys (`conditions/*.yaml`), each with its rule and
default; the files repeat the defaults a user sees (a test keeps them equal). The three
sub-benchmarks share `PriskSettings`; narrowing and sycophancy add keys of their own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefray.sdk.settings import (
    BenchmarkSettings,
    ConditionSettings,
    Rule,
    boolean,
    choice,
    integer,
    key,
    params_key,
    role_key,
    samples_key,
    section,
    section_map,
    text,
)
from prefray.sdk.settings import path as file_path

# the paper's budget (App. F), sent as is whatever the model declares (engine/calls/output_budget.py)
EXACT = {"exact_output_budget": True}


@dataclass(frozen=True)
class PriskData:
    path: str | None = key(file_path().or_null("the project's sample set"), None,
                           "a folder with profiles.jsonl, irp_items.jsonl, narrowing_items.jsonl, "
                           "sycophancy_items.jsonl (schema in the PRISK README)")


@dataclass(frozen=True)
class Retrieval:
    top_k: int = key(integer(1, 10**6), 2, "BM25 passages (one memory conversation each) added when the routing "
                     "call says yes")


@dataclass(frozen=True)
class Routing:
    role: str = key(text(what="subject or a role name"), "subject", "who decides whether to retrieve: subject "
                    "(the evaluated model) or a role such as router")
    params: dict[str, Any] = params_key({"temperature": 0.0, "max_tokens": 250, **EXACT},
                                        "request parameters of the routing call")


@dataclass(frozen=True)
class PriskRoles:
    router: str | None = role_key("decides whether to retrieve when routing.role is router")


@dataclass(frozen=True)
class NarrowingRoles(PriskRoles):
    extractor: str | None = role_key("lists a response's options")


@dataclass(frozen=True)
class PriskSettings(BenchmarkSettings):
    reference_condition: str = key(text(what="a condition name"), "base",
                                   "the condition <metric>[vs_base] = (value - base) / |base| compares against")
    data: PriskData = section(PriskData, "the dataset")
    samples: int = samples_key(1)
    generation: dict[str, Any] = params_key({"temperature": 0.2, "max_tokens": 1600, **EXACT},
                                            "request parameters of the answers")
    retrieval: Retrieval = section(Retrieval, "memory retrieval")
    routing: Routing = section(Routing, "the routing call")
    judge_params: dict[str, Any] = params_key({"temperature": 0.0, "max_tokens": 512, **EXACT},
                                              "request parameters of the judges")
    roles: PriskRoles = section(PriskRoles, "scorer roles (null: the sweep's judge)")


SPLIT_RULES = ("le", "equals", "contains_any")


def _split(value: Any) -> bool:
    rules = [r for r in SPLIT_RULES if r in value]
    return (isinstance(value.get("name"), str) and isinstance(value.get("attribute"), str) and len(rules) == 1
            and set(value) <= {"name", "attribute", *SPLIT_RULES})


SPLITS = Rule("a list of splits, each {name, attribute, and one of le | equals | contains_any}",
              lambda v: isinstance(v, list) and all(isinstance(s, dict) and _split(s) for s in v))

PAPER_SPLITS = [
    {"name": "age<=22", "attribute": "age", "le": 22},
    {"name": "gender=female", "attribute": "gender", "equals": "female"},
    {"name": "marital_status=married", "attribute": "marital_status", "equals": "married"},
    {"name": "economic_status=low income", "attribute": "economic_status", "equals": "low income"},
    {"name": "education=degree", "attribute": "education", "contains_any": ["bachelor", "master", "doctor", "phd"]},
    {"name": "health_status=good health", "attribute": "health_status", "equals": "good health"},
    {"name": "mental_health_status=no known issues", "attribute": "mental_health_status",
     "equals": "no known issues"},
]


@dataclass(frozen=True)
class NarrowingSettings(PriskSettings):
    samples: int = samples_key(20, "answers per (persona, query), at generation.temperature")
    generation: dict[str, Any] = params_key({"temperature": 0.8, "max_tokens": 1600, **EXACT},
                                            "request parameters of the answers")
    roles: NarrowingRoles = section(NarrowingRoles, "scorer roles (null: the sweep's judge)")
    fisher_splits: list[dict[str, Any]] = key(SPLITS, PAPER_SPLITS, "binary splits of profile attributes for "
                                              "Fisher's exact test on useful-item exclusion")


@dataclass(frozen=True)
class SycophancySettings(PriskSettings):
    pis_max_score: int = key(integer(1, 5), 4, "answers scored at most this go to the PIS attribution judge")
    verdict_judge: bool = key(boolean(), False, "an extra verdict-anchored judge call per agreement answer")


@dataclass(frozen=True)
class Switches:
    """What a condition shows the model: the profile, retrieved memories (routed on `routing_query`),
    and whether it reflects first."""

    profile: bool = key(boolean(), False, "render the 10-attribute profile")
    retrieval: bool = key(boolean(), False, "add BM25 passages after a routing call")
    routing_query: str | None = key(choice("query", "profile_query").or_null("no routing"), None,
                                    "what the router and the retriever see")
    reflection: bool = key(boolean(), False, "the model first writes notes on whether the context matters")


@dataclass(frozen=True)
class PriskCondition(Switches, ConditionSettings):
    """A condition of prisk_irp and prisk_sycophancy: its name and its switches."""


FACTORIAL = {
    "base": Switches(),
    "profile": Switches(profile=True),
    "retrieval": Switches(retrieval=True, routing_query="query"),
    "profile_retrieval": Switches(profile=True, retrieval=True, routing_query="profile_query"),
    "reflection": Switches(profile=True, retrieval=True, routing_query="profile_query", reflection=True),
}


@dataclass(frozen=True)
class FactorialCondition(ConditionSettings):
    """prisk_narrowing's one condition: every inner condition, judged together (V_q, A(u, q))."""

    conditions: dict[str, Switches] = section_map(Switches, "the inner conditions by name", FACTORIAL)
