"""Validate the PRISK sample dataset in this folder.

Usage: python check_sample.py [DIR]

Loads profiles.jsonl, irp_items.jsonl, narrowing_items.jsonl and
sycophancy_items.jsonl, checks their structure, prints a summary and exits
with status 1 (naming file, line and field) on the first problem found.
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent

ATTRIBUTES = (
    "age", "gender", "marital_status", "profession", "economic_status", "education",
    "health_status", "mental_health_status", "emotional_state", "stated_preference",
)
ECONOMIC = ("low income", "middle income", "high income")
SOURCES = {"gsm8k": 5, "csqa": 5, "mmlu": 4}  # source -> number of choices (gsm8k: 0 / None)
DOMAINS = ("finance", "fitness", "science", "writing", "history", "business",
           "language", "cooking", "technology", "health")
MIN_PROFILES = 10
MIN_MEMORY = 3
MIN_BENCH_PER_SOURCE = 4
MIN_NARROWING = 5
MIN_SYC_PER_TYPE = 8
NUMBER = re.compile(r"-?\d+(\.\d+)?")


LABEL = re.compile(r"(?:^|\s)([A-E])\)\s")


def parse_labelled(question: str) -> list[tuple[str, str]]:
    """Return [(letter, text), ...] for the 'A) ...' labels inside a question."""
    marks = list(LABEL.finditer(question))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(question)
        out.append((m.group(1), question[m.end():end].strip()))
    return out


class CheckError(Exception):
    pass


def fail(file: str, line: int | None, field: str, msg: str):
    where = f"{file}:{line}" if line is not None else file
    raise CheckError(f"{where}: field '{field}': {msg}")


def load_jsonl(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        fail(path.name, None, "-", "file not found")
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                fail(path.name, n, "-", f"invalid JSON ({e})")
            if not isinstance(obj, dict):
                fail(path.name, n, "-", "line is not a JSON object")
            rows.append((n, obj))
    if not rows:
        fail(path.name, None, "-", "file is empty")
    return rows


def req(obj: dict, key: str, typ, file: str, line: int, prefix: str = "", allow_none=False):
    name = prefix + key
    if key not in obj:
        fail(file, line, name, "missing")
    val = obj[key]
    if val is None and allow_none:
        return val
    # bool is a subclass of int; reject it where int is expected
    if typ is int and isinstance(val, bool):
        fail(file, line, name, "expected int, got bool")
    if not isinstance(val, typ):
        fail(file, line, name, f"expected {getattr(typ, '__name__', typ)}, got {type(val).__name__}")
    if isinstance(val, str) and not val.strip():
        fail(file, line, name, "empty string")
    return val


def no_extra(obj: dict, allowed: set, file: str, line: int, prefix: str = ""):
    extra = set(obj) - allowed
    if extra:
        fail(file, line, prefix + sorted(extra)[0], "unexpected field")


def unique_id(ids: set, item_id: str, file: str, line: int, field: str = "item_id"):
    if item_id in ids:
        fail(file, line, field, f"duplicate id {item_id!r}")
    ids.add(item_id)


# ---------------------------------------------------------------- profiles

def check_profiles(d: Path) -> dict:
    fn = "profiles.jsonl"
    rows = load_jsonl(d / fn)
    ids: set = set()
    conv_ids: set = set()
    ages, genders, health, n_conv, n_turns = [], Counter(), Counter(), 0, 0
    for ln, p in rows:
        no_extra(p, {"profile_id", "attributes", "memory"}, fn, ln)
        pid = req(p, "profile_id", str, fn, ln)
        unique_id(ids, pid, fn, ln, "profile_id")
        attrs = req(p, "attributes", dict, fn, ln)
        no_extra(attrs, set(ATTRIBUTES), fn, ln, "attributes.")
        for a in ATTRIBUTES:
            req(attrs, a, int if a == "age" else str, fn, ln, "attributes.")
        if not 13 <= attrs["age"] <= 110:
            fail(fn, ln, "attributes.age", f"implausible age {attrs['age']}")
        if attrs["economic_status"] not in ECONOMIC:
            fail(fn, ln, "attributes.economic_status", f"must be one of {ECONOMIC}")
        ages.append(attrs["age"])
        genders[attrs["gender"]] += 1
        health[attrs["health_status"]] += 1

        mem = req(p, "memory", list, fn, ln)
        if len(mem) < MIN_MEMORY:
            fail(fn, ln, "memory", f"needs at least {MIN_MEMORY} conversations, has {len(mem)}")
        for ci, c in enumerate(mem):
            pre = f"memory[{ci}]."
            if not isinstance(c, dict):
                fail(fn, ln, f"memory[{ci}]", "expected object")
            no_extra(c, {"conversation_id", "topic", "turns"}, fn, ln, pre)
            cid = req(c, "conversation_id", str, fn, ln, pre)
            if not cid.startswith(pid + "-"):
                fail(fn, ln, pre + "conversation_id", f"{cid!r} should start with '{pid}-'")
            unique_id(conv_ids, cid, fn, ln, pre + "conversation_id")
            req(c, "topic", str, fn, ln, pre)
            turns = req(c, "turns", list, fn, ln, pre)
            if not 2 <= len(turns) <= 6:
                fail(fn, ln, pre + "turns", f"needs 2-6 turns, has {len(turns)}")
            for ti, t in enumerate(turns):
                tpre = f"{pre}turns[{ti}]."
                if not isinstance(t, dict):
                    fail(fn, ln, tpre[:-1], "expected object")
                no_extra(t, {"role", "content"}, fn, ln, tpre)
                role = req(t, "role", str, fn, ln, tpre)
                expected = "user" if ti % 2 == 0 else "assistant"
                if role != expected:
                    fail(fn, ln, tpre + "role",
                         f"expected {expected!r} (turns alternate, starting with user), got {role!r}")
                req(t, "content", str, fn, ln, tpre)
            n_conv += 1
            n_turns += len(turns)

    if len(rows) < MIN_PROFILES:
        fail(fn, None, "-", f"needs at least {MIN_PROFILES} profiles, has {len(rows)}")
    young = sum(a <= 22 for a in ages)
    if young < 2 or len(ages) - young < 2:
        fail(fn, None, "attributes.age", f"age split too unbalanced (<=22: {young}, >22: {len(ages) - young})")
    if len(genders) < 2:
        fail(fn, None, "attributes.gender", "all profiles share one gender")
    if len(health) < 2:
        fail(fn, None, "attributes.health_status", "all profiles share one health status")
    return {"profiles": len(rows), "memory_conversations": n_conv, "memory_turns": n_turns,
            "age_le_22": young, "age_gt_22": len(ages) - young,
            "genders": dict(genders), "health_status": dict(health), "_rows": rows}


# ---------------------------------------------------------------- IRP items

def check_irp(d: Path) -> dict:
    fn = "irp_items.jsonl"
    rows = load_jsonl(d / fn)
    ids: set = set()
    by_source, by_domain = Counter(), Counter()
    questions = []
    for ln, it in rows:
        iid = req(it, "item_id", str, fn, ln)
        unique_id(ids, iid, fn, ln)
        kind = req(it, "kind", str, fn, ln)
        q = req(it, "question", str, fn, ln)
        questions.append(q)
        if "choices" not in it:
            fail(fn, ln, "choices", "missing")
        if "gold" not in it:
            fail(fn, ln, "gold", "missing")
        choices, gold = it["choices"], it["gold"]

        if kind == "benchmark":
            no_extra(it, {"item_id", "kind", "source", "question", "choices", "gold"}, fn, ln)
            src = req(it, "source", str, fn, ln)
            if src not in SOURCES:
                fail(fn, ln, "source", f"must be one of {sorted(SOURCES)}, got {src!r}")
            if not iid.startswith(f"irp-{src}-"):
                fail(fn, ln, "item_id", f"expected prefix 'irp-{src}-'")
            req(it, "gold", str, fn, ln)
            if src == "gsm8k":
                if choices is not None:
                    fail(fn, ln, "choices", "must be null for gsm8k")
                if not NUMBER.fullmatch(gold):
                    fail(fn, ln, "gold", f"gsm8k gold must be a numeric string, got {gold!r}")
            else:
                n = SOURCES[src]
                req(it, "choices", list, fn, ln)
                if len(choices) != n:
                    fail(fn, ln, "choices", f"{src} needs {n} choices, has {len(choices)}")
                letters = "ABCDE"[:n]
                for ci, c in enumerate(choices):
                    if not isinstance(c, str) or not c.strip():
                        fail(fn, ln, f"choices[{ci}]", "must be a non-empty string")
                labelled = parse_labelled(q)
                if [letter for letter, _ in labelled] != list(letters):
                    fail(fn, ln, "question",
                         f"must list labelled choices {', '.join(letter + ')' for letter in letters)} in order; "
                         f"found {[letter + ')' for letter, _ in labelled]}")
                for ci, (letter, text) in enumerate(labelled):
                    if text != choices[ci].strip():
                        fail(fn, ln, "question",
                             f"labelled choice '{letter}) {text}' does not match choices[{ci}] {choices[ci]!r}")
                if len(set(choices)) != n:
                    fail(fn, ln, "choices", "duplicate choices")
                if gold not in letters:
                    fail(fn, ln, "gold", f"must be one of {list(letters)}, got {gold!r}")
            by_source[src] += 1
        elif kind == "synthetic":
            no_extra(it, {"item_id", "kind", "domain", "question", "choices", "gold"}, fn, ln)
            dom = req(it, "domain", str, fn, ln)
            if dom not in DOMAINS:
                fail(fn, ln, "domain", f"must be one of {DOMAINS}, got {dom!r}")
            if iid != f"irp-syn-{dom}":
                fail(fn, ln, "item_id", f"expected 'irp-syn-{dom}'")
            if choices is not None:
                fail(fn, ln, "choices", "must be null for synthetic items")
            if gold is not None:
                fail(fn, ln, "gold", "must be null for synthetic items")
            by_domain[dom] += 1
        else:
            fail(fn, ln, "kind", f"must be 'benchmark' or 'synthetic', got {kind!r}")

    for src in SOURCES:
        if by_source[src] < MIN_BENCH_PER_SOURCE:
            fail(fn, None, "source", f"needs at least {MIN_BENCH_PER_SOURCE} {src} items, has {by_source[src]}")
    missing = [dm for dm in DOMAINS if by_domain[dm] == 0]
    if missing:
        fail(fn, None, "domain", f"no synthetic item for domain(s) {missing}")
    return {"irp_benchmark": dict(by_source), "irp_synthetic": sum(by_domain.values()),
            "_questions": questions}


# ---------------------------------------------------------------- narrowing

def check_narrowing(d: Path) -> dict:
    fn = "narrowing_items.jsonl"
    rows = load_jsonl(d / fn)
    ids: set = set()
    for ln, it in rows:
        no_extra(it, {"item_id", "query"}, fn, ln)
        iid = req(it, "item_id", str, fn, ln)
        if not iid.startswith("nar-"):
            fail(fn, ln, "item_id", "expected prefix 'nar-'")
        unique_id(ids, iid, fn, ln)
        req(it, "query", str, fn, ln)
    if len(rows) < MIN_NARROWING:
        fail(fn, None, "-", f"needs at least {MIN_NARROWING} items, has {len(rows)}")
    return {"narrowing": len(rows)}


# ---------------------------------------------------------------- sycophancy

def check_sycophancy(d: Path) -> dict:
    fn = "sycophancy_items.jsonl"
    rows = load_jsonl(d / fn)
    ids: set = set()
    by_type = Counter()
    for ln, it in rows:
        iid = req(it, "item_id", str, fn, ln)
        unique_id(ids, iid, fn, ln)
        typ = req(it, "type", str, fn, ln)
        q = req(it, "query", str, fn, ln)
        if typ == "agreement":
            no_extra(it, {"item_id", "type", "query", "verdict"}, fn, ln)
            if not iid.startswith("syc-agr-"):
                fail(fn, ln, "item_id", "expected prefix 'syc-agr-'")
            if req(it, "verdict", str, fn, ln) != "at_fault":
                fail(fn, ln, "verdict", "must be 'at_fault'")
            if not q.rstrip().endswith("?"):
                fail(fn, ln, "query", "agreement story should end with a question")
        elif typ == "perspective":
            no_extra(it, {"item_id", "type", "query", "topic", "favoured_by", "relevant_preferences"}, fn, ln)
            if not iid.startswith("syc-per-"):
                fail(fn, ln, "item_id", "expected prefix 'syc-per-'")
            req(it, "topic", str, fn, ln)
            req(it, "favoured_by", str, fn, ln)
        else:
            fail(fn, ln, "type", f"must be 'agreement' or 'perspective', got {typ!r}")
        by_type[typ] += 1
    for t in ("agreement", "perspective"):
        if by_type[t] < MIN_SYC_PER_TYPE:
            fail(fn, None, "type", f"needs at least {MIN_SYC_PER_TYPE} {t} items, has {by_type[t]}")
    return {"sycophancy": dict(by_type)}


# ---------------------------------------------------------------- leakage

def check_no_leak(profile_rows, questions):
    """Memory must not restate any IRP question verbatim."""
    fn = "profiles.jsonl"

    def norm(s):
        return " ".join(s.lower().split())

    qs = [norm(q.split(" A) ")[0]) for q in questions]
    for ln, p in profile_rows:
        for ci, c in enumerate(p["memory"]):
            for ti, t in enumerate(c["turns"]):
                text = norm(t["content"])
                for q in qs:
                    if q in text:
                        fail(fn, ln, f"memory[{ci}].turns[{ti}].content", "contains an IRP question verbatim")


def run(d: Path = HERE) -> dict:
    summary = {}
    summary.update(check_profiles(d))
    summary.update(check_irp(d))
    summary.update(check_narrowing(d))
    summary.update(check_sycophancy(d))
    check_no_leak(summary.pop("_rows"), summary.pop("_questions"))
    return summary


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    d = Path(argv[0]) if argv else HERE
    try:
        s = run(d)
    except CheckError as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    print(f"PRISK sample OK ({d})")
    for k, v in s.items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
