"""PRISK's headline table (paper Table 2) for `prefray report`: the IRP score, useful-item recall
(over the union of the samples, as the README reads Table 2) and the sycophancy score under the four
personalization conditions, in percent; bold: the lowest value of each column (the largest change)."""

from prefray.engine.results.paper_tables import Column, PaperTable

CONDITIONS = (("Base", "base"), ("w/ Prof", "profile"), ("w/ Ret", "retrieval"), ("w/ Both", "profile_retrieval"))
DIMENSIONS = (("IRP", "prisk_irp", "IRP_score"), ("UIR", "prisk_narrowing", "NAR_UIR_union"),
              ("Sycophancy", "prisk_sycophancy", "SYC_score"))

PAPER_TABLES = (
    PaperTable(
        name="prisk_table2", title="PRISK Table 2", benchmark="prisk_irp",
        caption="Personalization risk under four conditions: w/ Prof the profile only, w/ Ret routed "
                "retrieval only, w/ Both profile and retrieval. Percentages; lower is a larger change.",
        columns=tuple(Column(header, metric, condition, benchmark=benchmark, group=group, best="min")
                      for group, benchmark, metric in DIMENSIONS for header, condition in CONDITIONS),
    ),
)
