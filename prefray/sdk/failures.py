"""The failure policy a benchmark's metrics follow (docs/failures.md): a stored row's failure class
(`failure_classes`, `FAILURE_CLASSES`), counts per class (`class_counts`), and whether a row is the
evaluated model's own failure, scored as a wrong answer (`is_model_failure`)."""

from prefray.engine.failures import FAILURE_CLASSES, class_counts, failure_classes, is_model_failure

__all__ = ["FAILURE_CLASSES", "class_counts", "failure_classes", "is_model_failure"]
