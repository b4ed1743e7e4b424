"""PRISK's tables for `prefray report`, in percent.

Table 2 (the headline): the IRP score, useful-item recall (over the union of the samples, as the
README reads Table 2) and the sycophancy score under the four personalization conditions; bold: the
lowest value of each column (the largest change). Its IRP column is the judge score of the
synthetic items, `IRP_score[kind=synthetic]`: the paper scores IRP with the judge "for evaluation on
the synthetic data" and normalises that score to 0-100% "in Table 2" (§3.3); `IRP_score`, which
adds the benchmark-adapted items, stays in metrics.csv.

Table 4 (mitigation): "before vs. after self-reflection under the profile + retrieval setting.
Δ = After − Before": each dimension's value under `profile_retrieval` (before) and `reflection`
(after), and the paired difference reflection − profile_retrieval from deltas.parquet (its
interval; n = the paired queries). IRP accuracy on the benchmark-adapted items is added beside the
three dimensions."""

from prefray.sdk.tables import Column, PaperTable

CONDITIONS = (("Base", "base"), ("w/ Prof", "profile"), ("w/ Ret", "retrieval"), ("w/ Both", "profile_retrieval"))
DIMENSIONS = (("IRP", "prisk_irp", "IRP_score[kind=synthetic]"), ("UIR", "prisk_narrowing", "NAR_UIR_union"),
              ("Sycophancy", "prisk_sycophancy", "SYC_score"))
MITIGATION = (*DIMENSIONS[:1], ("IRP accuracy", "prisk_irp", "IRP_accuracy"), *DIMENSIONS[1:])
BEFORE, AFTER = "profile_retrieval", "reflection"


def _mitigation_columns(group: str, benchmark: str, metric: str) -> tuple[Column, ...]:
    return (Column("Before", metric, BEFORE, benchmark=benchmark, group=group),
            Column("After", metric, AFTER, benchmark=benchmark, group=group),
            Column("Δ", metric, AFTER, benchmark=benchmark, group=group, versus=BEFORE))


PAPER_TABLES = (
    PaperTable(
        name="prisk_table2", title="PRISK Table 2", benchmark="prisk_irp",
        caption="Personalization risk under four conditions: w/ Prof the profile only, w/ Ret routed "
                "retrieval only, w/ Both profile and retrieval. IRP: the judge score of the synthetic "
                "items. Percentages; lower is a larger change.",
        columns=tuple(Column(header, metric, condition, benchmark=benchmark, group=group, best="min")
                      for group, benchmark, metric in DIMENSIONS for header, condition in CONDITIONS),
    ),
    PaperTable(
        name="prisk_table4", title="PRISK Table 4", benchmark="prisk_irp",
        caption="Mitigation: before vs. after self-reflection under the profile + retrieval setting. "
                "Δ = After − Before, paired on the query (its n: the paired queries). IRP: the judge "
                "score of the synthetic items; IRP accuracy: exact match on the benchmark-adapted items. "
                "Percentages.",
        columns=tuple(column for group, benchmark, metric in MITIGATION
                      for column in _mitigation_columns(group, benchmark, metric)),
    ),
)
