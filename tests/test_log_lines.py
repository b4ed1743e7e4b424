"""The engine logs and never prints; every command shows its lines, less with --quiet, more with --verbose."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from prefray.app import COMMANDS, main
from tests.conftest import command_here, launch_here

ENGINE = Path(__file__).resolve().parents[1] / "prefray" / "engine"
PLAN = ("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=2")
# the debug line the plan's counting logs per benchmark × condition cell (engine/flow/counting.py)
COUNTED = "plan: benchpres/fake/default/fake counted for 1 job(s) of its benchmark × condition cell, over 2 instance(s)"


def print_calls(path: Path) -> list[int]:
    """Lines of `path` that call the builtin print."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]


def test_no_engine_module_calls_print():
    found = {str(p.relative_to(ENGINE)): lines for p in sorted(ENGINE.rglob("*.py")) if (lines := print_calls(p))}
    assert found == {}, f"the engine logs (logging.getLogger(__name__)) instead of printing: {found}"


def test_the_print_finder_finds_a_print(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import sys\n\ndef f():\n    print('x', file=sys.stderr)\n    log.info('y')\n")
    assert print_calls(module) == [4]


def test_every_command_takes_quiet_and_verbose(capsys):
    for name in COMMANDS:
        assert main(name, ["--help"]) == 0
        shown = capsys.readouterr().out
        assert "--quiet" in shown and "--verbose" in shown, name
        assert "show only warnings and errors" in shown and "show debug lines too" in shown, name


def test_verbose_adds_the_debug_lines_and_quiet_keeps_the_estimate():
    default = command_here("plan", *PLAN)
    verbose = command_here("plan", "--verbose", *PLAN)
    quiet = command_here("plan", *PLAN, "--quiet")
    assert default.returncode == verbose.returncode == quiet.returncode == 0
    assert COUNTED not in default.stderr and default.stderr == ""
    assert verbose.stderr.splitlines() == [COUNTED]
    assert quiet.stderr == ""
    # the estimate is the command's result, shown at every level
    assert default.stdout.startswith("prefray estimate (nothing sent)")
    assert default.stdout == verbose.stdout == quiet.stdout


def test_a_refused_launch_says_why_when_quiet():
    done = launch_here("--quiet", "model=fake", "judge=fake", "limit=0", forbid_ray=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "prefray: nothing was run: limit=0: allowed is an integer >= 1 and <= 100000000, or null (all instances)"]


@pytest.mark.e2e
def test_quiet_silences_a_launchs_info_lines(run_cli, fake_server, tmp_path):
    args = ("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=1", "benchmark.samples=1",
            "run.cache=false", "run.progress=false", *fake_server.model_overrides())
    shown = run_cli(*args, f"run.dir={tmp_path / 'shown'}")
    quiet = run_cli("--quiet", *args, f"run.dir={tmp_path / 'quiet'}")
    # by default: the headline table, where the metrics are, and what the run found (stdout)
    assert "prefray metrics (headline" in shown.stdout
    assert f"metrics: {tmp_path / 'shown' / 'metrics.csv'}" in shown.stdout
    assert quiet.stdout == "" and quiet.stderr == ""
    assert (tmp_path / "quiet" / "metrics.csv").read_bytes() == (tmp_path / "shown" / "metrics.csv").read_bytes()
