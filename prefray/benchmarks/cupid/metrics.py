"""CUPID metrics: pure functions over the stored rows (SHARD_SCHEMA) of every model × condition.

Inference, per instance i (paper §2.3): the matcher rates each of the k_i inferred checklist items
against the true preference and each of the t_i true items against the inferred preference as
1 / 0.5 / 0, and
    P_i = Σ ratings of inferred items / k_i      R_i = Σ ratings of true items / t_i
    F1_i = 2 P_i R_i / (P_i + R_i)   (0 when P_i + R_i = 0)
The headline `precision` and `recall` are the means P̄, R̄ of P_i, R_i over the counted instances
(Table 1: "averaged across all instances"), and the headline `F1` is the F1 of those means,
    F1 = 2 P̄ R̄ / (P̄ + R̄)   (0 when P̄ + R̄ = 0)
as every P/R/F1 triple the paper prints satisfies (Tables 1, 9 and 11); the mean of F1_i is kept as
`F1_instance_mean`. Every slice (all instances, each instance type) is computed alike. An instance
whose inferred checklist is empty (k_i = 0, also a model failure, which counts as an empty
checklist) has P_i = 0 and needs no matcher call: inferring nothing never raises the mean. `n` =
the instances averaged (scored + model failures), the same for all four.
The reference code's pooled ratios are kept beside them under names that say so:
    precision_pooled = Σ_i ratings of inferred items / Σ_i k_i   (n = instances with k_i > 0)
    recall_pooled    = Σ_i ratings of true items / Σ_i t_i        (n = instances with t_i > 0)
    F1_pooled        = 2 P R / (P + R) of the two                  (n = instances in either pool)
An instance that adds no item to a pool (an empty inferred checklist, a model failure) is not
averaged there: it is left out of that metric's `n` and counted in its `excluded`; a pool with no
item is NaN, and so is F1_pooled then.
Generation: `alignment` = mean judge score over scored instances.

Failures follow `prefray.sdk.failures`. Each instance of a task ends in one outcome:
- scored;
- model failure: the evaluated model overflowed its context or its inference stayed unreadable or
  empty after the re-ask. Scored as the reference scores it: an inference counts as an empty
  checklist (0 of 0 inferred items, 0 of t true items), a generation as alignment 0;
- judge failure: a decomposer, matcher or judge answer stayed unreadable after its re-ask, or a
  matcher rated another number of entries than the checklist holds, also when asked once more
  (stage `rematch`; counted in `matcher_length_mismatch`). Excluded and counted;
- no answer: some call of its chain never got an answer (infrastructure, budget, not yet run).
  Excluded and counted; a rerun finishes it.
Rows `failures_model[task=…]`, `failures_judge[task=…]`, `no_answer[task=…]` count these (n =
instances the task was attempted for); the `excluded` column of a metric = judge failures + no
answers. Metrics are reported per sweep judge (the `meta.judge` of scorer rows).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.cupid.data import INSTANCE_TYPES
from prefray.benchmarks.cupid.outcomes import JUDGE_FAILURE, MODEL_FAILURE, NO_ANSWER, instance_outcomes

Part = dict[str, np.ndarray]  # one cell's instances of a task, column by column


def f1(precision: float, recall: float) -> float:
    if math.isnan(precision) or math.isnan(recall):
        return math.nan
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def sequential_sum(values: np.ndarray) -> float:
    """Σ values added one after another from 0, in order (numpy's `sum` adds pairwise, which may
    round differently)."""
    return float(np.cumsum(np.concatenate(([0.0], values.astype(np.float64))))[-1])


def cell_parts(instances: pa.Table, n_cells: int) -> list[Part]:
    """The instances of each cell (rows in cell order), as numpy columns; `instance_type` as codes
    into `types` (a one-entry column)."""
    types = pc.dictionary_encode(instances["instance_type"]).combine_chunks()
    columns = {name: np.asarray(instances[name].to_numpy()) for name in instances.column_names
               if name not in ("instance_type", "persona", "score")}
    columns["instance_type"] = np.asarray(types.indices.to_numpy(zero_copy_only=False))
    if "score" in instances.column_names:
        columns["has_score"] = np.asarray(instances["score"].is_valid().to_numpy(zero_copy_only=False), bool)
        columns["score"] = np.asarray(instances["score"].fill_null(0.0).to_numpy())
    bounds = np.searchsorted(columns["cell"], np.arange(n_cells + 1))
    names = np.array(types.dictionary.to_pylist() + [""], dtype=object)
    return [{**{k: v[a:b] for k, v in columns.items()}, "types": names}
            for a, b in zip(bounds[:-1], bounds[1:])]


def slices(part: Part) -> list[tuple[str, np.ndarray]]:
    """("" for every instance, then each instance type present in reported order, with its mask)."""
    present = {part["types"][code]: code for code in np.unique(part["instance_type"])}
    keys = ([k for k in INSTANCE_TYPES if k in present] + sorted(set(present) - set(INSTANCE_TYPES)))
    everything = [("", np.ones(len(part["outcome"]), bool))] if len(part["outcome"]) else []
    return everything + [(k, part["instance_type"] == present[k]) for k in keys]


def _suffix(key: str) -> str:
    return f"[instance_type={key}]" if key else ""


def failure_rows(task: str, model_failures: int, judge_failures: int, no_answer: int,
                 attempted: int) -> list[dict[str, Any]]:
    return [{"metric": f"{name}[task={task}]", "value": float(value), "n": attempted}
            for name, value in (("failures_model", model_failures), ("failures_judge", judge_failures),
                                ("no_answer", no_answer))]


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def instance_ratios(hits: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Σ ratings ÷ items per instance; 0 for an instance with no item."""
    hits, items = hits.astype(np.float64), items.astype(np.float64)
    return np.divide(hits, items, out=np.zeros(len(hits)), where=items > 0)


def instance_f1(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    """2PR/(P+R) element by element (0 where P + R = 0): of each instance's P_i and R_i, or of the
    means P̄ and R̄ (one value or one per bootstrap resample: the interval of `F1`)."""
    precision, recall = np.asarray(precision, np.float64), np.asarray(recall, np.float64)
    total = precision + recall
    return np.divide(2 * precision * recall, total, out=np.zeros(np.shape(total)), where=total > 0)


def _mean(values: np.ndarray) -> float:
    return sequential_sum(values) / len(values) if len(values) else math.nan


def inference_metrics(part: Part) -> list[dict[str, Any]]:
    """precision and recall (per-instance means), F1 of the two means, F1_instance_mean, and the pooled
    variants, overall and per instance type; the mismatch and failure counts overall."""
    out = []
    for key, mask in slices(part):
        outcome = part["outcome"][mask]
        counted = mask & (part["outcome"] != JUDGE_FAILURE) & (part["outcome"] != NO_ANSWER)
        scored, attempted = _count(counted), len(outcome)
        k, t = part["n_inferred"][counted], part["n_true"][counted]
        hit_inferred, hit_true = part["hit_inferred"][counted], part["hit_true"][counted]
        p_i, r_i = instance_ratios(hit_inferred, k), instance_ratios(hit_true, t)
        p_mean, r_mean = _mean(p_i), _mean(r_i)
        for name, value in (("precision", p_mean), ("recall", r_mean), ("F1", f1(p_mean, r_mean)),
                            ("F1_instance_mean", _mean(instance_f1(p_i, r_i)))):
            out.append({"metric": name + _suffix(key), "value": value, "n": scored, "excluded": attempted - scored})
        n_k, n_t, n_any = _count(k > 0), _count(t > 0), _count((k > 0) | (t > 0))
        p = sequential_sum(hit_inferred) / int(k.sum()) if n_k else math.nan
        r = sequential_sum(hit_true) / int(t.sum()) if n_t else math.nan
        for name, value, n in (("precision_pooled", p, n_k), ("recall_pooled", r, n_t),
                               ("F1_pooled", f1(p, r), n_any)):
            out.append({"metric": name + _suffix(key), "value": value, "n": n, "excluded": attempted - n})
        if not key:
            out.append({"metric": "matcher_length_mismatch", "value": float(_count(part["mismatched"])),
                        "n": attempted})
            out += failure_rows("inference", _count(outcome == MODEL_FAILURE), _count(outcome == JUDGE_FAILURE),
                                _count(outcome == NO_ANSWER), attempted)
    return out


def alignment_metrics(part: Part) -> list[dict[str, Any]]:
    """Mean judge score overall and per instance type; the failure counts overall."""
    out = []
    for key, mask in slices(part):
        outcome, has_score = part["outcome"][mask], part["has_score"][mask]
        values = part["score"][mask][has_score]
        mean = sequential_sum(values) / len(values) if len(values) else math.nan
        out.append({"metric": "alignment" + _suffix(key), "value": mean, "n": len(values),
                    "excluded": len(outcome) - len(values)})
        if not key:
            judge_failures = _count(~has_score & (outcome == JUDGE_FAILURE))
            out += failure_rows("generation", _count(has_score & (outcome == MODEL_FAILURE)), judge_failures,
                                _count(~has_score) - judge_failures, len(outcome))
    return out


def parse_failure_rows(parse_failures: pa.Table, n_cells: int) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = [[] for _ in range(n_cells)]
    for r in parse_failures.to_pylist():
        out[r["cell"]].append({"metric": f"parse_failures_{r['stage']}", "value": float(r["failed"]), "n": r["n"]})
    return out


def cupid_metrics(rows: pa.Table) -> list[dict[str, Any]]:
    """Long-format metric dicts per model × condition × sweep judge."""
    outcomes = instance_outcomes(rows)
    n_cells = outcomes.cells.num_rows
    inference, generation = (cell_parts(t, n_cells) for t in (outcomes.inference, outcomes.generation))
    parse_failures = parse_failure_rows(outcomes.parse_failures, n_cells)
    out = []
    for cell, names in enumerate(outcomes.cells.to_pylist()):
        metrics = inference_metrics(inference[cell]) + alignment_metrics(generation[cell]) + parse_failures[cell]
        out += [{**names, **m} for m in metrics]
    return out
