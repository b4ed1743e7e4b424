"""BenchPreS — does a model apply remembered user preferences only where the context allows?

Paper: "BenchPreS" (arXiv 2603.16557). A profile's persistent memory holds ~150 first-person
statements, 5 of them preferences (role, style, tone, markers, nickname); each of 39
recipient–task contexts labels every preference apply (g=1) or suppress (g=0). The model writes
the message 3 times at temperature 1.0; a judge decides per (response, preference) whether the
preference is reflected (nicknames by exact match) and grades task completeness 1–5.
Conditions: default, defense (an instruction to apply only fitting preferences), no_preferences
(the memory without its preference statements; the completeness baseline).
Metrics: MR, AAR, AAR−MR (per domain, per category), completeness and its paired delta,
failure-class counts, unmapped contexts.

Run: prefray launch -m benchmark=benchpres condition=all model=local judge=local limit=2
"""

from prefray.benchmarks.benchpres.benchmark import BenchPreS

BENCHMARK = BenchPreS()

__all__ = ["BENCHMARK", "BenchPreS"]
