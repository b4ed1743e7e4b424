"""PRISK narrowing metrics over the stored rows of the whole-design job (see narrowing.py).

Denominators: an answer is owed per stored `generate@c` row (ok or not) and per failed
reflection. A model failure (context overflow) is an answer offering nothing (C = ∅, scored). An
answer whose extraction or whose query's merge failed, or with an option the current merge never
saw, is excluded (counted); a
(persona, query) whose usefulness judgement failed or returned the wrong number of flags excludes
its answers from UIR (counted). Base answers are scored for UIR against A(u, q) of every persona
of the query, one value per (persona, base sample).

Two readings of the 20 samples (paper §3.3: "we sample each personalized response 20 times"; App.
A.2: "We sample each personalized response 20 times to ensure reasonable coverage", with raw item
counts per persona): `NAR_CR`, `NAR_UIR`, `NAR_RelCR` average over answers (per sample);
`NAR_CR_union`, `NAR_UIR_union`, `NAR_RelCR_union` take C as the union of the V_q items offered over
the samples of one (persona, query) pair (of one query under base), one value per pair. CR and UIR
are percentages (Table 2 reports "All metrics ... as percentages"); RelCR is a ratio (App. D.2:
"RelCR=0.13").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from prefray.benchmarks.prisk import narrowing_sets as sets
from prefray.benchmarks.prisk.metrics import Split, cluster_key, fisher_split, metric
from prefray.sdk.failures import is_model_failure


def _latest(recs: list[dict[str, Any]], model: str) -> dict[str, dict[str, Any]]:
    """item → its merge row over the most option keys (see narrowing.latest_merges)."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted((r for r in recs if r["stage"] == "merge" and r["model"] == model), key=lambda r: r["instance_id"]):
        if r["item"] not in out or len(r["meta"]["keys"]) > len(out[r["item"]]["meta"]["keys"]):
            out[r["item"]] = r
    return out


def _merges(latest: dict[str, dict[str, Any]]) -> dict[str, dict[str, str] | None]:
    """item → key → V_q item, None when the merge call failed."""
    return {item: sets.merge_groups(r["meta"]["keys"], r["value"]["same_as"]) if r["status"] == "ok" else None
            for item, r in latest.items()}


def _useful(recs: list[dict[str, Any]], model: str,
            latest: dict[str, dict[str, Any]]) -> dict[tuple[str, str], tuple[set[str] | None, dict]]:
    """(persona, item) → (A(u, q) or None, persona attributes), from the judgements over the current V_q."""
    digests = {item: r["meta"].get("digest") for item, r in latest.items()}
    out = {}
    for r in recs:
        if r["stage"] == "useful" and r["model"] == model and r["meta"].get("digest") == digests.get(r["item"]):
            a = sets.useful_items(r["meta"]["items"], r["value"]["useful"]) if r["status"] == "ok" else None
            out[(r["meta"]["profile_id"], r["item"])] = (a, r["meta"]["attributes"])
    return out


def _answers(recs: list[dict[str, Any]], model: str, merges: dict) -> dict[str, list[dict[str, Any]]]:
    """condition → answers {persona, item, sample, C (None = excluded)}, one per owed answer."""
    extracted = {(r["meta"]["condition"], r["meta"]["answer_instance"], r["sample"]): r for r in recs
                 if r["stage"] == "extract" and r["model"] == model}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if r["model"] != model or not r["stage"].startswith(("generate@", "reflect@")):
            continue
        condition = r["stage"].split("@", 1)[1]
        if r["stage"].startswith("reflect@") and r["status"] == "ok":
            continue  # an ok reflection is owed through its generate row
        e = extracted.get((condition, r["instance_id"], r["sample"]))
        item_of = merges.get(r["item"])
        if r["status"] != "ok" and is_model_failure(r):
            c: set[str] | None = set()  # the model's own failure (context overflow): an answer offering nothing
        else:
            c = sets.items_of(e["value"]["options"], item_of) if e and e["status"] == "ok" and item_of else None
        persona = r["meta"].get("profile_id", "")
        out.setdefault(condition, []).append({"persona": persona, "item": r["item"], "sample": r["sample"], "C": c})
    return out


@dataclass(frozen=True)
class Pool:
    """V_q across every evaluated model: query → key → item (None: some model's merge of that query
    failed, so its V_q cannot be built), and the models whose answers it holds."""

    items: dict[str, dict[str, str] | None]
    models: tuple[str, ...]


def pooled_universe(recs: list[dict[str, Any]]) -> Pool:
    """The paper's V_q: "aggregate all model answers across personas into a universal answer set
    V_q for each query" (§3.3). Each model's job merged its own answers' options (its latest merge
    per query); V_q joins those merge graphs (`pool_merges`). Reads only the merge rows."""
    merge_rows = [r for r in recs if r["stage"] == "merge"]
    models = tuple(sorted({r["model"] for r in merge_rows}))
    graphs: dict[str, list[tuple[list[str], list[int]]] | None] = {}
    for model in models:
        for item, r in _latest(merge_rows, model).items():
            if r["status"] != "ok":
                graphs[item] = None
            elif graphs.setdefault(item, []) is not None:
                graphs[item].append((r["meta"]["keys"], r["value"]["same_as"]))
    return Pool({item: None if g is None else sets.pool_merges(g) for item, g in sorted(graphs.items())}, models)


def _pooled(rows: list[dict[str, Any]], pool: Pool) -> list[dict[str, Any]]:
    """Answers with C mapped from the model's own V_q items to V_q's items across models (None when
    the query has no V_q)."""
    out = []
    for r in rows:
        to_pool = pool.items.get(r["item"])
        c = None if r["C"] is None or to_pool is None else {to_pool[i] for i in r["C"]}
        out.append({**r, "C": c})
    return out


def _pooled_useful(useful: dict, pool: Pool) -> dict:
    """A(u, q) on V_q's items across models: each item judged useful, mapped as C is."""
    out = {}
    for (persona, item), (a, attributes) in useful.items():
        to_pool = pool.items.get(item)
        out[(persona, item)] = (None if a is None or to_pool is None else {to_pool[i] for i in a}, attributes)
    return out


OWN = "[Vq=model]"   # the extra reading: V_q of this model's answers alone


def narrowing_values(recs: list[dict[str, Any]], splits: list[Split], pool: Pool | None = None) -> list[dict[str, Any]]:
    """Every metric over V_q across the models of `pool` (default: the models of `recs`), with CR,
    CR over the union and |V_q| also on each model's own V_q (suffix `[Vq=model]`)."""
    pool = pooled_universe(recs) if pool is None else pool
    out = []
    for model in sorted({r["model"] for r in recs}):
        latest = _latest(recs, model)
        merges = _merges(latest)
        out += _universe_rows(model, pool, merges)
        answers = _answers(recs, model, merges)
        useful = _useful(recs, model, latest)
        pooled_useful = _pooled_useful(useful, pool)
        base, pooled_base = answers.get("base", []), _pooled(answers.get("base", []), pool)
        for condition, rows in sorted(answers.items()):
            out += condition_rows(model, condition, _pooled(rows, pool), pooled_base, pool.items, pooled_useful,
                                  splits)
            out += [{**r, "metric": r["metric"] + OWN} for r in condition_rows(
                model, condition, rows, base, merges, useful, []) if r["metric"] in ("NAR_CR", "NAR_CR_union")]
    return out


def _universe_rows(model: str, pool: Pool, merges: dict) -> list[dict[str, Any]]:
    """|V_q| across models per query and on average, the model's own |V_q| on average, and
    `NAR_Vq_models`: how many models' answers V_q holds (1 in a run of one model)."""
    head = {"model": model, "condition": "factorial", "judge": ""}
    sizes = {item: len(sets.universe(m)) for item, m in sorted(pool.items.items()) if m is not None}
    rows = [{**head, "metric": f"NAR_Vq_size[item={item}]", "value": float(n), "n": 1, "excluded": 0}
            for item, n in sizes.items()]
    failed = sum(1 for m in pool.items.values() if m is None)
    own = [float(len(sets.universe(m))) for m in merges.values() if m is not None]
    return rows + [{**head, **metric("NAR_Vq_size", [float(n) for n in sizes.values()], failed)},
                   {**head, **metric("NAR_Vq_size" + OWN, own, len(merges) - len(own))},
                   {**head, "metric": "NAR_Vq_models", "value": float(len(pool.models)), "n": len(pool.items),
                    "excluded": 0}]


def condition_rows(model: str, condition: str, rows: list[dict], base: list[dict], merges: dict,
                   useful: dict, splits: list[Split]) -> list[dict[str, Any]]:
    head = {"model": model, "condition": condition, "judge": ""}
    universes = {item: sets.universe(m) for item, m in merges.items() if m is not None}
    scored = [r for r in rows if r["C"] is not None]
    cr = [100.0 * sets.coverage_ratio(r["C"], universes[r["item"]]) for r in scored]
    out = [{**head, **metric("NAR_CR", cr, len(rows) - len(scored),
                             [cluster_key(r["persona"], r["item"]) for r in scored])}]
    out.append({**head, **_relcr(scored, base)})
    uir, uir_units, missing = [], [], 0
    incidences: Counter[tuple[tuple[str, str], bool]] = Counter()  # ((persona, item), excluded) → useful items
    personas_of: dict[str, list[str]] = {}
    for persona, item in sorted(useful):
        personas_of.setdefault(item, []).append(persona)
    for r in scored:
        personas = [r["persona"]] if r["persona"] else personas_of.get(r["item"], [])
        for persona in personas:
            a, _ = useful.get((persona, r["item"]), (None, {}))
            if a is None:
                missing += 1
            elif a:
                uir.append(100.0 * sets.useful_recall(r["C"], a))
                uir_units.append(cluster_key(r["persona"], r["item"]))  # a base answer: its query, whatever the persona
                if r["persona"]:
                    incidences[((persona, r["item"]), True)] += len(a - r["C"])
                    incidences[((persona, r["item"]), False)] += len(a & r["C"])
    out.append({**head, **metric("NAR_UIR", uir, len(rows) - len(scored) + missing, uir_units)})
    out += _union_rows(head, rows, base, universes, useful, personas_of)
    for split in splits:
        result = fisher_split(_split_incidences(split, incidences, useful).elements())
        if result is not None:
            odds, p, table = result
            n = sum(map(sum, table))
            out.append({**head, "metric": f"NAR_fisher_p[{split.name}]", "value": p, "n": n, "excluded": 0})
            out.append({**head, "metric": f"NAR_fisher_or[{split.name}]", "value": odds, "n": n, "excluded": 0})
    return out


def _split_incidences(split: Split, incidences: Counter[tuple[tuple[str, str], bool]],
                      useful: dict) -> Counter[tuple[bool, bool]]:
    """(in the split's group, excluded) → useful items; each (persona, query)'s attributes read once."""
    out: Counter[tuple[bool, bool]] = Counter()
    for (pair, excluded), count in incidences.items():
        out[(split.member(useful[pair][1]), excluded)] += count
    return out


def unions(rows: list[dict]) -> dict[tuple[str, str], set[str] | None]:
    """(persona, item) → the union of C over the pair's scored samples (None: no sample was scored)."""
    groups: dict[tuple[str, str], list[set[str]]] = {}
    for r in rows:
        groups.setdefault((r["persona"], r["item"]), [])
        if r["C"] is not None:
            groups[(r["persona"], r["item"])].append(r["C"])
    return {key: set().union(*cs) if cs else None for key, cs in sorted(groups.items())}


def _union_rows(head: dict[str, Any], rows: list[dict], base: list[dict], universes: dict[str, set[str]], useful: dict,
                personas_of: dict[str, list[str]]) -> list[dict[str, Any]]:
    """CR, UIR and RelCR with C = the union over a pair's samples: one value per (persona, query); a
    pair with no scored sample is excluded (counted). Under base, one union per query, scored for
    UIR against every persona's A(u, q) (one value per persona, all in the query's cluster)."""
    mine, base_union = unions(rows), {item: c for (_, item), c in unions(base).items()}
    cr, uir, relcr = [], [], []
    cr_missing = uir_missing = rel_missing = 0
    for (persona, item), c in mine.items():
        unit = cluster_key(persona, item)
        if c is None:
            cr_missing, uir_missing, rel_missing = cr_missing + 1, uir_missing + 1, rel_missing + 1
            continue
        cr.append((unit, 100.0 * sets.coverage_ratio(c, universes[item])))
        for p in [persona] if persona else personas_of.get(item, []):
            a, _ = useful.get((p, item), (None, {}))
            if a is None:
                uir_missing += 1
            elif a:
                uir.append((unit, 100.0 * sets.useful_recall(c, a)))
        reference = base_union.get(item)
        if reference:
            relcr.append((unit, len(c) / len(reference)))
        else:
            rel_missing += 1
    return [{**head, **metric(name, [v for _, v in pairs], missing, [u for u, _ in pairs])}
            for name, pairs, missing in (("NAR_CR_union", cr, cr_missing), ("NAR_UIR_union", uir, uir_missing),
                                         ("NAR_RelCR_union", relcr, rel_missing))]


def _relcr(scored: list[dict], base: list[dict]) -> dict[str, Any]:
    """mean|C| / mean|C_base| per (persona, query) (per query for base answers), then averaged."""
    base_sizes: dict[str, list[int]] = {}
    for r in base:
        if r["C"] is not None:
            base_sizes.setdefault(r["item"], []).append(len(r["C"]))
    groups: dict[tuple[str, str], list[int]] = {}
    for r in scored:
        groups.setdefault((r["persona"], r["item"]), []).append(len(r["C"]))
    ratios = [(cluster_key(persona, item), sets.relative_coverage(sizes, base_sizes.get(item, [])))
              for (persona, item), sizes in sorted(groups.items())]
    kept = [(unit, x) for unit, x in ratios if x == x]
    return metric("NAR_RelCR", [x for _, x in kept], len(ratios) - len(kept), [unit for unit, _ in kept])
