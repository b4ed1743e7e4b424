"""The test suite's fixtures and collection checks for every test folder: `tests/`, each built-in
benchmark's `prefray/benchmarks/<b>/tests/` and `examples/*/tests/`. They live in tests/fixtures.py,
loaded once here as a plugin, so the session's Ray cluster and fake server are one per process
whichever folder a test sits in."""

pytest_plugins = ["tests.fixtures"]
