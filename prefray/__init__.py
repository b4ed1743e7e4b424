"""prefray — distributed batch evaluation of LLM personalization benchmarks."""

__version__ = "0.1.0"
