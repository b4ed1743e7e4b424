"""How a sweep runs: the job runner (stages as tasks), the sweep session, progress, exit codes, run ownership,
the answer journal."""
