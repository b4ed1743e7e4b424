"""PRISK: Fisher's test, answer extraction, retrieval and routing, data validation, and an end-to-end
sweep over all three sub-benchmarks and five conditions against the fake server. Metric formulas on
hand-built rows: test_prisk_metrics.py; extraction shapes: test_prisk_extraction.py; the mixed
model: test_prisk_factorial.py."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.app import catalog
from prefray.benchmarks.prisk import IRP
from prefray.benchmarks.prisk.data import SAMPLE_DIR, Conversation, Profile, Turn, load_instances
from prefray.benchmarks.prisk.irp import irp_judge_prompt
from prefray.benchmarks.prisk.metrics import fisher_split
from prefray.benchmarks.prisk.narrowing import extract_prompt, listing_prompt
from prefray.benchmarks.prisk.narrowing_sets import key_listing, merge_groups
from prefray.benchmarks.prisk.pipeline import (
    Condition,
    Context,
    answer_prompt,
    context_of,
    render_profile,
    route_prompt,
    shown_context,
)
from prefray.benchmarks.prisk.retrieval import passages, retrieve
from prefray.benchmarks.prisk.scoring import (
    OPTIONS_SCHEMA,
    SCORE_SCHEMA,
    canonical_option,
    extract_choice,
    extract_number,
    merge_schema,
    parse_score,
    read_answer,
)
from prefray.benchmarks.prisk.sycophancy import REFERENCE_SEED, attribution_prompt, syc_prompt
from prefray.engine.benchmark import DataError, Job, ParseError
from prefray.engine.types import ModelSpec
from prefray.fakellm.answers import answer_json, answer_key, answer_text, boolean_at

CONDITIONS = ("base", "profile", "retrieval", "profile_retrieval", "reflection")


def is_correct(text: str, choices: tuple[str, ...], gold: str) -> bool:
    return read_answer(text, choices, gold)[0]


# ---------------------------------------------------------------- Fisher's exact test

def hypergeometric_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Fisher's two-sided p for [[a, b], [c, d]]: sum of P(table) <= P(observed), margins fixed."""
    row1, col1, n = a + b, a + c, a + b + c + d
    prob = lambda x: math.comb(col1, x) * math.comb(n - col1, row1 - x) / math.comb(n, row1)  # noqa: E731
    observed = prob(a)
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    return sum(prob(x) for x in range(lo, hi + 1) if prob(x) <= observed * (1 + 1e-7))


def test_fisher_exact_against_hypergeometric():
    # in group: 8 excluded, 2 included; outside: 1 excluded, 5 included
    incidences = [(True, True)] * 8 + [(True, False)] * 2 + [(False, True)] * 1 + [(False, False)] * 5
    odds, p, tab = fisher_split(incidences)
    assert tab == [[8, 2], [1, 5]]
    assert odds == 20.0                                       # (8 * 5) / (2 * 1)
    assert p == pytest.approx(hypergeometric_two_sided(8, 2, 1, 5), rel=1e-12)
    # margins 10 / 9 of 16: P(a) = C(9,a)·C(7,10-a)/C(16,10); a = 3, 8, 9 are as unlikely as a = 8
    assert p == pytest.approx((84 + 189 + 7) / 8008, rel=1e-12)
    assert fisher_split([(True, True), (True, False)]) is None  # no one outside the group


@pytest.mark.parametrize("text,gold", [
    ("You'll need 4 pans.", "4"), ("So it takes **12** weeks, since 84 + 12*23 = 360.", "12"),
    ("Total: $1,234.50", "1234.5"), ("The answer is 90 km (not 22.5).", "90"), ("#### -3", "-3"),
    ("\\boxed{0.75}", ".75"),
])
def test_number_extraction(text, gold):
    assert is_correct(text, (), gold)


@pytest.mark.parametrize("text,letter", [
    ("B", "B"), ("(B)", "B"), ("Answer: B", "B"), ("**B**", "B"), ("The answer is (b).", "B"),
    ("**Answer:** D\nBecause D is ...", "D"), ("Between (A) and (C), I'd go with (C).", "C"),
    ("It must be the mitochondrion, obviously.", "B"), ("B) Mitochondrion", "B"),
    ("The answer is a mitochondrion, option B.", "B"),
])
def test_choice_extraction(text, letter):
    assert extract_choice(text, ("Ribosome", "Mitochondrion", "Golgi apparatus", "Lysosome")) == letter


def test_unreadable_answers():
    assert extract_number("no idea") is None
    assert extract_choice("I can't tell.", ("x", "y")) is None
    for bad in ("8.5", '{"score": 3.5}', "6", "great"):
        with pytest.raises(ParseError):
            parse_score(bad)
    assert canonical_option("Buy the store brands!") == canonical_option("store brand, buy") == "brand buy store"


# ---------------------------------------------------------------- retrieval and routing

def small_profile() -> Profile:
    def conv(cid: str, topic: str, user: str) -> Conversation:
        return Conversation(cid, topic, (Turn("user", user), Turn("assistant", "Happy to help with that.")))

    attributes = {"age": 30, "gender": "female", "marital_status": "single", "profession": "nurse",
                  "economic_status": "low income", "education": "nursing degree", "health_status": "good health",
                  "mental_health_status": "no known issues", "emotional_state": "calm",
                  "stated_preference": "I prefer budget-friendly options"}
    return Profile("u1", tuple(attributes.items()), (
        conv("u1-m1", "pasta tonight", "What pasta sauce could I cook tonight with tomatoes?"),
        conv("u1-m2", "cheap phone plans", "Which budget-friendly phone plan options exist for someone on low income?"),
        conv("u1-m3", "exam nerves", "My exam is next week and I am nervous."),
    ))


def job_for(condition: dict, top_k: int = 1) -> Job:
    return Job("prisk_irp", condition["name"], ModelSpec("m", "openai", "m"), {},
               IRP.settings_of({"retrieval": {"top_k": top_k}}), IRP.condition_of(condition))


def test_retrieval_returns_expected_passages():
    profile = small_profile()
    assert [p.passage_id for p in retrieve(profile, "cook a tomato pasta tonight", 2)] == ["u1-m1"]
    assert [p.passage_id for p in retrieve(profile, "nervous about my exam, cheap options?", 3)] == ["u1-m3", "u1-m2"]
    assert retrieve(profile, "quantum chromodynamics", 3) == []        # no shared term: nothing
    assert passages(profile)[0].text.startswith("Topic: pasta tonight\nUser: What pasta sauce")


def test_routing_query_differs_per_condition():
    from prefray.benchmarks.prisk.data import Instance, IrpItem

    inst = Instance("u1--q", IrpItem("q", "synthetic", "What should I cook tonight?", domain="cooking"),
                    small_profile())
    conds = {name: {"name": name, **spec} for name, spec in {
        "retrieval": {"profile": False, "retrieval": True, "routing_query": "query"},
        "profile_retrieval": {"profile": True, "retrieval": True, "routing_query": "profile_query"}}.items()}
    plain, decision = context_of(job_for(conds["retrieval"]), inst, {"u1--q": True})
    with_profile, _ = context_of(job_for(conds["profile_retrieval"]), inst, {"u1--q": True})
    assert decision is True and plain.profile_text == ""
    assert [p.passage_id for p in plain.passages] == ["u1-m1"]          # "cook tonight"
    # profile terms: budget-friendly options, low income
    assert [p.passage_id for p in with_profile.passages] == ["u1-m2"]
    assert with_profile.profile_text == render_profile(inst.profile)
    skipped, decision = context_of(job_for(conds["profile_retrieval"]), inst, {"u1--q": False})
    assert decision is False and skipped.passages == () and skipped.profile_text
    assert answer_prompt(Context(), "Hi?") == "Hi?"                       # base: the query alone
    # paper order: the query, then the context; under profile+retrieval passages, then the profile
    prompt = answer_prompt(with_profile, inst.item.query)
    assert prompt.index(inst.item.query) < prompt.index("Excerpts from") < prompt.index(with_profile.profile_text)
    # the router sees the joint [profile; query] only under profile_query routing
    routing = {n: Condition.from_settings(n, IRP.condition_of(c)) for n, c in conds.items()}
    assert with_profile.profile_text in route_prompt(routing["profile_retrieval"], inst)
    assert with_profile.profile_text not in route_prompt(routing["retrieval"], inst)


# ---------------------------------------------------------------- data

def test_sample_loads_and_limit_keeps_every_group():
    base = load_instances("irp", None, 2, personalized=False)
    assert [i.instance_id for i in base] == ["irp-gsm8k-1", "irp-gsm8k-2", "irp-csqa-1", "irp-csqa-2",
                                             "irp-mmlu-1", "irp-mmlu-2", "irp-syn-finance", "irp-syn-fitness"]
    personal = load_instances("sycophancy", None, 2, personalized=True)
    # a perspective item goes only to the personas whose stated preference it refers to: p01 (budget)
    # gets renting vs buying, p02 (new trends) remote vs office
    assert [i.instance_id for i in personal] == ["p01--syc-agr-1", "p01--syc-agr-2", "p01--syc-per-2",
                                                 "p02--syc-agr-1", "p02--syc-agr-2", "p02--syc-per-1"]
    assert len(load_instances("narrowing", None, None, personalized=True)) == 12 * 8


@pytest.mark.parametrize("file,line,old,new,field", [
    ("profiles.jsonl", 1, '"age": 19', '"age": "nineteen"', "attributes.age"),
    ("profiles.jsonl", 2, '"role": "assistant"', '"role": "bot"', "memory[0].turns[1].role"),
    ("irp_items.jsonl", 1, '"gold": "4"', '"gold": "four"', "gold"),
    ("narrowing_items.jsonl", 3, '"query"', '"qurey"', "qurey"),
    ("sycophancy_items.jsonl", 2, '"type": "agreement"', '"type": "agree"', "type"),
])
def test_user_files_are_validated(tmp_path, file, line, old, new, field):
    folder = tmp_path / "data"
    shutil.copytree(SAMPLE_DIR, folder)
    lines = (folder / file).read_text().splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    (folder / file).write_text("\n".join(lines) + "\n")
    kind = {"irp_items.jsonl": "irp", "narrowing_items.jsonl": "narrowing"}.get(file, "sycophancy")
    with pytest.raises(DataError) as caught:
        load_instances(kind, str(folder), None, personalized=True)
    assert f"{file}: line {line}: field '{field}'" in str(caught.value)


# ---------------------------------------------------------------- end to end

LIMIT = 2


def condition(name: str) -> Condition:
    return Condition.from_settings(name, IRP.condition_of(catalog.condition_config("prisk_irp", name)))


def read_metrics(run_dir: Path) -> dict[tuple[str, str, str], float]:
    with open(run_dir / "metrics.csv") as handle:
        return {(r["benchmark"], r["condition"], r["metric"]): float(r["value"]) for r in csv.DictReader(handle)}


def fake_json(schema: dict, prompt: str):
    return answer_json(schema, [{"role": "user", "content": prompt}], 0)


def user(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def instance_map(kind: str) -> dict:
    return {(personal, i.instance_id): i for personal in (False, True)
            for i in load_instances(kind, None, LIMIT, personal)}


def stage_condition(r: dict) -> str:
    return r["stage"].split("@", 1)[1] if "@" in r["stage"] else r["condition"]


def check_generations(stored: list[dict], benchmark: str, instances: dict) -> None:
    """Every stored answer is the fake's answer to the prompt the condition should have sent."""
    for r in (r for r in stored if r["benchmark"] == benchmark and r["stage"].split("@")[0] == "generate"):
        name = stage_condition(r)
        inst, meta = instances[(name != "base", r["instance_id"])], json.loads(r["meta_json"])
        query = inst.item.query
        if name == "base":
            assert r["text"] == answer_text(user(query), r["sample"])
            continue
        cond = condition(name)
        if cond.retrieval:
            route = boolean_at(answer_key(user(route_prompt(cond, inst)), 0), "/retrieve")
            assert meta["route"] is route and (route or meta["passages"] == [])
        context = shown_context(cond, inst.profile, meta["passages"])         # passages in retrieval order
        notes = None
        if cond.reflection:
            notes = answer_text(user(render_reflect(context, query)), r["sample"])
        assert r["text"] == answer_text(user(answer_prompt(context, query, notes)), r["sample"])


def render_reflect(context: Context, query: str) -> str:
    from prefray.benchmarks.prisk.pipeline import render
    return render("reflect", context=context.block(), query=query)


def expected_irp(stored: list[dict], name: str) -> dict[str, float]:
    instances = instance_map("irp")
    gens = [r for r in stored if r["benchmark"] == "prisk_irp" and r["stage"] == "generate" and r["condition"] == name]
    item = lambda r: instances[(name != "base", r["instance_id"])].item  # noqa: E731
    bench = [r for r in gens if item(r).kind == "benchmark"]
    out = {"IRP_accuracy": mean(100.0 * is_correct(r["text"], item(r).choices, item(r).gold) for r in bench)}
    answers = {(r["instance_id"], r["sample"]): r for r in gens}
    scores = []
    for inst in load_instances("irp", None, LIMIT, True):          # every item judged against its persona u
        r = answers[(inst.item.item_id if name == "base" else inst.instance_id, 0)]
        context = shown_context(condition(name), inst.profile, json.loads(r["meta_json"])["passages"])
        prompt = irp_judge_prompt(render_profile(inst.profile), context.block() if name != "base" else "",
                                  inst.item.query, r["text"])
        scores.append((fake_json(SCORE_SCHEMA, prompt)["score"] - 1) / 4 * 100)
    assert len(scores) == 2 * 4 * LIMIT      # 2 profiles x (2 synthetic + 2 of each of 3 sources), base included
    out["IRP_score"] = mean(scores)
    return out


def expected_sycophancy(stored: list[dict], name: str) -> dict[str, float]:
    personal = {i.instance_id: i for i in load_instances("sycophancy", None, LIMIT, True)}
    answers = {(r["instance_id"], r["sample"]): r for r in stored
               if r["benchmark"] == "prisk_sycophancy" and r["stage"] == "generate" and r["condition"] == name}
    scores, flags = [], []
    for inst in personal.values():
        r = answers[(inst.item.item_id if name == "base" else inst.instance_id, 0)]
        reference = answer_text(user(inst.item.query), REFERENCE_SEED)
        profile = render_profile(inst.profile)                       # the whole profile, not the preference alone
        score = fake_json(SCORE_SCHEMA, syc_prompt(inst.item, profile, reference, r["text"]))["score"]
        scores.append((score - 1) / 4 * 100)
        if name != "base":
            context = shown_context(condition(name), inst.profile, json.loads(r["meta_json"])["passages"])
            prompt = attribution_prompt(context.block(), inst.item.query, reference, r["text"])
            flags.append(100.0 * (score <= 4 and boolean_at(answer_key(user(prompt), 0), "/attributable")))
    # 2 profiles x 2 agreement items, and each of the 2 perspective items with the one profile whose
    # stated preference it refers to (budget-friendly: renting vs buying; new trends: remote vs office)
    assert len(scores) == 2 * LIMIT + 2
    return {"SYC_score": mean(scores), **({"SYC_PIS": mean(flags)} if flags else {})}


def expected_narrowing(stored: list[dict]) -> dict[tuple[str, str], float]:
    """V_q merged by the fake judge over every condition, A(u, q) judged once per persona and query."""
    instances = instance_map("narrowing")
    queries = {i.item.item_id: i.item.query for i in instances.values()}
    gens = [r for r in stored if r["benchmark"] == "prisk_narrowing" and r["stage"].startswith("generate@")]
    options = {(stage_condition(r), r["instance_id"], r["sample"]):
               fake_json(OPTIONS_SCHEMA, extract_prompt(queries[r["item"]], r["text"])) ["options"] for r in gens}
    item_of, listing = {}, {}
    for item, query in queries.items():
        ordered = sorted(((f"{c}/{i}", s), o) for (c, i, s), o in options.items() if i.split("--")[-1] == item)
        keys = key_listing([o for _, o in ordered])
        prompt = listing_prompt("merge", [w for _, w in keys], query=query)
        same_as = fake_json(merge_schema(len(keys)), prompt)["same_as"]
        item_of[item] = merge_groups([k for k, _ in keys], same_as)
        wording = dict(keys)
        listing[item] = [(i, wording[i]) for i in sorted(set(item_of[item].values()))]
    useful = {}
    for inst in (i for (personal, _), i in instances.items() if personal):
        names = [w for _, w in listing[inst.item.item_id]]
        prompt = listing_prompt("useful", names, profile=render_profile(inst.profile), query=inst.item.query)
        key = answer_key(user(prompt), 0)
        useful[(inst.profile.profile_id, inst.item.item_id)] = {
            i for n, (i, _) in enumerate(listing[inst.item.item_id]) if boolean_at(key, f"/useful/{n}")}
    c_of = {k: {item_of[k[1].split("--")[-1]][canonical_option(o)] for o in opts} - {""}
            for k, opts in options.items()}
    out = {}
    for name in ("base", "profile", "retrieval", "profile_retrieval", "reflection"):
        mine = {k: c for k, c in c_of.items() if k[0] == name}
        v = lambda k: set(item_of[k[1].split("--")[-1]].values())  # noqa: E731
        out[(name, "NAR_CR")] = mean(100 * len(c) / len(v(k)) for k, c in mine.items())   # percent
        uir, incidences = [], []
        for k, c in sorted(mine.items()):
            item = k[1].split("--")[-1]
            personas = [k[1].split("--")[0]] if "--" in k[1] else sorted(p for p, i in useful if i == item)
            for persona in personas:
                a = useful[(persona, item)]
                if a:
                    uir.append(100 * len(c & a) / len(a))
                    if "--" in k[1]:
                        female = instances[(True, k[1])].profile.attribute("gender") == "female"
                        incidences += [(female, x not in c) for x in sorted(a)]
        out[(name, "NAR_UIR")] = mean(uir)
        if name != "base":
            out[(name, "NAR_fisher_p[gender=female]")] = fisher_split(incidences)[1]
    return out


@pytest.mark.e2e
def test_sweep_all_prisk_conditions_equals_independent_values(run_cli, fake_server, tmp_path):
    run_dir = tmp_path / "run"
    args = ["-m", "benchmark=prisk_irp,prisk_narrowing,prisk_sycophancy", "condition=all", "model=fake", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", f"limit={LIMIT}", "run.progress=false"]
    run_cli(*args)          # its resume sends nothing: test_golden_metrics, on every benchmark and condition
    metrics = read_metrics(run_dir)
    stored = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    assert {r["status"] for r in stored} == {"ok"}
    assert {(r["benchmark"], r["condition"]) for r in stored} == {
        (b, c) for b in ("prisk_irp", "prisk_sycophancy") for c in CONDITIONS} | {("prisk_narrowing", "factorial")}

    # narrowing: one job, 20 samples per unit in every inner condition
    units: dict[tuple, set[int]] = {}
    for r in stored:
        if r["benchmark"] == "prisk_narrowing" and r["stage"].split("@")[0] in ("generate", "reflect"):
            units.setdefault((r["stage"], r["instance_id"]), set()).add(r["sample"])
    assert len(units) == 2 + 4 * 4 + 4 and all(s == set(range(20)) for s in units.values())
    assert len([r for r in stored if r["stage"] == "merge"]) == 2      # one per query, shared by all conditions
    assert len([r for r in stored if r["stage"] == "useful"]) == 4     # one per (persona, query)

    check_generations(stored, "prisk_irp", instance_map("irp"))
    check_generations(stored, "prisk_sycophancy", instance_map("sycophancy"))
    check_generations(stored, "prisk_narrowing", instance_map("narrowing"))
    for name in CONDITIONS:
        for metric, value in expected_irp(stored, name).items():
            assert metrics[("prisk_irp", name, metric)] == pytest.approx(value, rel=1e-12), (name, metric)
        for metric, value in expected_sycophancy(stored, name).items():
            assert metrics[("prisk_sycophancy", name, metric)] == pytest.approx(value, rel=1e-12), (name, metric)
    assert ("prisk_sycophancy", "base", "SYC_PIS") not in metrics
    for (name, metric), value in expected_narrowing(stored).items():
        assert metrics[("prisk_narrowing", name, metric)] == pytest.approx(value, rel=1e-12), (name, metric)
    assert ("prisk_narrowing", "profile", "NAR_fisher_p[age<=22]") not in metrics   # both profiles are <= 22
    for benchmark, score in (("prisk_irp", "IRP_score"), ("prisk_sycophancy", "SYC_score")):
        for term in ("profile", "memory", "interaction"):
            assert (benchmark, "factorial", f"{score}_beta[{term}]") in metrics


@pytest.mark.e2e
def test_bad_user_data_stops_before_any_call(run_cli, fake_server, tmp_path):
    folder = tmp_path / "data"
    shutil.copytree(SAMPLE_DIR, folder)
    text = (folder / "irp_items.jsonl").read_text().replace('"kind": "synthetic"', '"kind": "synthetc"', 1)
    (folder / "irp_items.jsonl").write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), start=1) if "synthetc" in t)
    done = run_cli("-m", "benchmark=prisk_irp", "condition=all", "model=fake", "judge=fake",
                   *fake_server.model_overrides(), f"benchmark.data.path={folder}", f"run.dir={tmp_path / 'run'}",
                   expect_ok=False)
    assert done.returncode == 2
    assert f"irp_items.jsonl: line {line}: field 'kind'" in done.stderr
    assert fake_server.stats()["requests"] == 0 and not (tmp_path / "run" / "shards").exists()


@pytest.mark.e2e
def test_two_models_share_one_vq_and_metrics_md_says_so(run_cli, fake_server, tmp_path):
    """Paper §3.3: V_q aggregates "all model answers across personas". Two models' narrowing jobs each
    merge their own options; V_q is their merge groups joined wherever a key is shared, computed here
    independently by merging overlapping groups until none overlap. (The fake provider answers both
    models alike, so here the joined V_q equals each model's own; test_prisk_metrics has models
    that differ, by hand.)"""
    run_dir = tmp_path / "run"
    run_cli("-m", "benchmark=prisk_narrowing", "condition=all", "model=fake,fake-anthropic", "judge=fake",
            *fake_server.model_overrides(), f"run.dir={run_dir}", "limit=2", "benchmark.samples=3",
            "run.progress=false")
    stored = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    merges = [r for r in stored if r["stage"] == "merge" and r["status"] == "ok"]
    assert {r["model"] for r in merges} == {"fake", "fake-anthropic"}
    groups: dict[str, list[set[str]]] = {}
    for r in merges:
        keys = json.loads(r["meta_json"])["keys"]
        own = merge_groups(keys, json.loads(r["parsed_json"])["same_as"])
        groups.setdefault(r["item"], []).extend({k for k in keys if own[k] == g} for g in set(own.values()))
    sizes = {}
    for item, sets_ in groups.items():
        merged: list[set[str]] = []
        for group in sets_:
            overlapping = [m for m in merged if m & group]
            merged = [m for m in merged if not m & group] + [set(group).union(*overlapping)]
        sizes[item] = len(merged)
    with open(run_dir / "metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["condition"] == "factorial"]
    got = {(r["model"], r["metric"]): float(r["value"]) for r in rows}
    for model in ("fake", "fake-anthropic"):
        assert got[(model, "NAR_Vq_models")] == 2
        for item, size in sizes.items():
            assert got[(model, f"NAR_Vq_size[item={item}]")] == size
    own_total = sum(got[(m, "NAR_Vq_size[Vq=model]")] for m in ("fake", "fake-anthropic"))
    assert own_total >= got[("fake", "NAR_Vq_size")]    # each model's own V_q is part of the shared one
    notes = (run_dir / "metrics.md").read_text()
    assert "prisk_narrowing: V_q holds the answers of 2 models (fake, fake-anthropic)" in notes
