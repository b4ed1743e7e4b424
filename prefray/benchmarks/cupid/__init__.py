"""CUPID — can a model infer and apply a user's contextual preference from earlier sessions?

Paper: "CUPID: Evaluating Personalized and Contextualized Alignment of LLMs from Interactions"
(Kim et al., COLM 2025, arXiv 2508.01674). Each instance holds 8 prior multi-turn sessions whose
user feedback reveals context-dependent preferences, then a new request. Inference task: state the
single most likely preference; a decomposer turns it into a checklist and a matcher rates it
against the true one (precision, recall, F1). Generation task: answer the request; a judge scores
1–10 how well the answer satisfies the true preference. Conditions: full, oracle,
oracle_preference, summary.

Run: prefray launch -m benchmark=cupid condition=all model=local judge=local limit=3
"""

from prefray.benchmarks.cupid.benchmark import Cupid

BENCHMARK = Cupid()

__all__ = ["BENCHMARK", "Cupid"]
