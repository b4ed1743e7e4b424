"""PRISK — the hidden costs of personalization, in three sub-benchmarks.

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models". Users are
10-attribute profiles with memory conversations; five conditions (base, profile, retrieval,
profile_retrieval, reflection) add the profile, BM25-retrieved memories (after a routing call), or
both, with or without a reflection step. Sub-benchmarks:
  IRP         irrelevant personalization: exact-match accuracy and a judge's 1-5 score
  NARROWING   preference narrowing: V_q merged by meaning, A(u, q) judged once, CR, UIR, RelCR and
              Fisher's exact tests over 20 samples (one job runs all five conditions: `factorial`)
  SYCOPHANCY  lean toward the user's side (1 = heavily skewed, 5 = balanced) and PIS (percent)
IRP and sycophancy scores are also fitted with a mixed model over the 2×2 profile × memory design.

Run: prefray launch -m benchmark=prisk_irp,prisk_narrowing,prisk_sycophancy \
         condition=all model=local judge=local limit=1 benchmark.samples=2
"""

from prefray.benchmarks.prisk.irp import Irp
from prefray.benchmarks.prisk.narrowing import Narrowing
from prefray.benchmarks.prisk.sycophancy import Sycophancy

IRP = Irp("prisk_irp")
NARROWING = Narrowing("prisk_narrowing")
SYCOPHANCY = Sycophancy("prisk_sycophancy")

__all__ = ["IRP", "NARROWING", "SYCOPHANCY", "Irp", "Narrowing", "Sycophancy"]
