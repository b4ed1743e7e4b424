"""BenchPreS's headline table (paper Table 1) for `prefray report`: MR, AAR and AAR − MR per model
under the default condition, in percent; bold: the lowest MR, the highest AAR and AAR − MR; an
asterisk after a non-reasoning model, as the paper marks them ("Asterisk (*) indicates non-reasoning
models"), read from the model's config (`reasoning: false`)."""

from prefray.sdk.tables import Column, PaperTable, RowMark

NON_REASONING = RowMark(
    symbol="*", key="reasoning", value=False,
    note="non-reasoning model (its model config says reasoning: false; a model whose config does not say "
         "is not marked).")

PAPER_TABLES = (
    PaperTable(
        name="benchpres_table1", title="BenchPreS Table 1", benchmark="benchpres", scale=100.0, digits=2,
        caption="Misapplication Rate (MR), Appropriate Application Rate (AAR) and their difference "
                "(AAR - MR), in percent, condition default.",
        columns=(Column("MR", "MR", "default", best="min"), Column("AAR", "AAR", "default", best="max"),
                 Column("AAR - MR", "AAR-MR", "default", best="max")),
        row_mark=NON_REASONING,
    ),
)
