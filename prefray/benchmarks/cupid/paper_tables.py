"""CUPID's headline table (paper Table 1) for `prefray report`: precision, recall and F1 of the
inference task over all instances, per instance type (condition full) and in the oracle setting
(condition oracle), in percent; bold: the best value of each column. P and R are means over
instances and F1 = 2PR/(P+R) of those means (metric `F1`, as every triple of the paper's Tables 1,
9 and 11); the mean of per-instance F1 is `F1_instance_mean` in metrics.csv, not in this table."""

from prefray.sdk.tables import Column, PaperTable


def _prf(group: str, condition: str, slice_: str = "") -> tuple[Column, ...]:
    return tuple(Column(header, f"{metric}{slice_}", condition, group=group, best="max")
                 for header, metric in (("P", "precision"), ("R", "recall"), ("F1", "F1")))


PAPER_TABLES = (
    PaperTable(
        name="cupid_table1", title="CUPID Table 1", benchmark="cupid", scale=100.0,
        caption="Precision (P) and recall (R) on the inference task, averaged over all instances, "
                "each instance type and the oracle setting, and F1 = 2PR/(P+R) of the averaged P and R, "
                "in percent.",
        columns=(*_prf("All Instances", "full"),
                 *_prf("Consistent", "full", "[instance_type=consistent]"),
                 *_prf("Contrastive", "full", "[instance_type=contrastive]"),
                 *_prf("Changing", "full", "[instance_type=changing]"),
                 *_prf("Oracle Setting", "oracle")),
    ),
)
