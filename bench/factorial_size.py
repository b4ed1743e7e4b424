"""The size of PRISK's factorial tests on null data, and the fit's time at a realistic size.

    python bench/factorial_size.py [--runs 200] [--seed 1000] [--queries 8] [--personas 4 5 10]
    python bench/factorial_size.py --time

Null datasets shaped like a PRISK run (personas × queries × the 2×2 cells; one base answer per
query judged against each persona, three personalized answers per persona–query pair; no memory
and no interaction effect) go through the project's path (IRP judge rows → `irp.clustered` →
`factorial.factorial_rows`). For each fit the script reads the standard error back from the
interval (half-width over the reference's 0.975 quantile: t with the `_df` row when there is one,
else the normal) and counts p < 0.05 under both references: the t reference with Satterthwaite's
df (what `factorial.py` reports) and the normal reference (what it reported before). A fit that
raises is counted apart. Run it at an earlier commit to see that commit's rates.

`--time`: the CPU and wall time of `factorial_rows` at the bundled data's IRP size (12 personas ×
25 queries: 925 answers) and at 40 personas × 50 queries (6,050 answers).
"""

from __future__ import annotations

import argparse
import random
import time

QUERY_SD, PERSONA_SD, PAIR_SD, ANSWER_SD, JUDGE_SD = 0.6, 1.0, 0.4, 0.6, 0.3
TERMS = ("memory", "interaction")


def records(rng: random.Random, queries: int, personas: int) -> list[dict]:
    """IRP judge rows of one null dataset (as prisk/tests/test_prisk_factorial.py's `prisk_records`)."""
    rows = []

    def judged(condition: str, item: str, persona: str, answer: str, score: float) -> None:
        rows.append({"stage": "irp_judge", "model": "m", "judge": "j", "status": "ok", "condition": condition,
                     "item": item, "instance_id": f"{persona}--{item}", "sample": 0, "value": {"score": score},
                     "meta": {"profile_id": persona, "answer_instance": answer}})

    person = [rng.gauss(0, PERSONA_SD) for _ in range(personas)]
    for q in range(queries):
        a = rng.gauss(0, QUERY_SD)
        base = 4 + a + rng.gauss(0, ANSWER_SD)
        for u in range(personas):
            judged("base", f"q{q}", f"u{u}", f"q{q}", base + rng.gauss(0, JUDGE_SD))
        for u in range(personas):
            pair = rng.gauss(0, PAIR_SD)
            for condition, p in (("profile", 1), ("retrieval", 0), ("profile_retrieval", 1)):
                y = 4 - 2 * p + a + person[u] + pair + rng.gauss(0, ANSWER_SD) + rng.gauss(0, JUDGE_SD)
                judged(condition, f"q{q}", f"u{u}", f"u{u}--q{q}", y)
    return rows


def p_values(rows: dict[str, float], term: str) -> tuple[float, float]:
    """(p with the t reference and the reported df, p with the normal reference) of one term."""
    from scipy.stats import norm
    from scipy.stats import t as student

    beta, low, high = rows[f"IRP_beta[{term}]"], rows[f"IRP_ci_low[{term}]"], rows[f"IRP_ci_high[{term}]"]
    df = rows.get(f"IRP_df[{term}]", float("inf"))
    se = (high - low) / 2 / student.ppf(0.975, df)
    return float(2 * student.sf(abs(beta / se), df)), float(2 * norm.sf(abs(beta / se)))


def null_rates(personas: int, queries: int, runs: int, seed: int) -> None:
    from prefray.benchmarks.prisk.factorial import factorial_rows
    from prefray.benchmarks.prisk.irp import clustered

    rng = random.Random(seed + personas)
    t_ref, normal, failed, dfs = dict.fromkeys(TERMS, 0), dict.fromkeys(TERMS, 0), 0, []
    for _ in range(runs):
        values = clustered(records(rng, queries, personas), "irp_judge", "m", "j")
        try:
            rows = {r["metric"]: r["value"] for r in factorial_rows("IRP", values, "m", "j")}
        except Exception:   # noqa: BLE001 — counted, as a user's aggregation would have stopped there
            failed += 1
            continue
        for term in TERMS:
            p_t, p_normal = p_values(rows, term)
            t_ref[term] += p_t < 0.05
            normal[term] += p_normal < 0.05
        dfs.append(rows.get("IRP_df[memory]", float("nan")))
    dfs.sort()
    median = dfs[len(dfs) // 2] if dfs else float("nan")
    print(f"personas={personas} queries={queries} datasets={runs} fits_failed={failed} "
          f"t(Satterthwaite)={t_ref} normal={normal} median_df[memory]={median:.1f}", flush=True)


def timing() -> None:
    from prefray.benchmarks.prisk.factorial import factorial_rows
    from prefray.benchmarks.prisk.irp import clustered

    for personas, queries in ((12, 25), (40, 50)):
        values = clustered(records(random.Random(1), queries, personas), "irp_judge", "m", "j")
        wall, cpu = time.perf_counter(), time.process_time()
        factorial_rows("IRP", values, "m", "j")
        print(f"personas={personas} queries={queries} answers={len(values)}: "
              f"wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--personas", type=int, nargs="+", default=[4, 5, 10])
    parser.add_argument("--time", action="store_true", help="time the fit at a realistic size instead")
    args = parser.parse_args()
    if args.time:
        timing()
        return
    for personas in args.personas:
        null_rates(personas, args.queries, args.runs, args.seed)


if __name__ == "__main__":
    main()
