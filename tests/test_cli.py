"""One command: `prefray COMMAND`, `python -m prefray.COMMAND` and the one runner behind both.

Bad arguments end in exit 2 and one line; Ctrl-C ends in exit 130 and one line, for every command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points

import pytest

from prefray import app, cli
from tests.conftest import ROOT, run_together

COMMANDS = ["launch", "plan", "rerun", "rejudge", "view", "compact", "upload", "compare", "report", "judge-check"]

# Arguments each command refuses before doing anything: argparse's own refusals, a malformed Hydra
# override, a cause that does not exist, a rejudge without a judge.
BAD_ARGUMENTS = [
    ("launch", ["--bogus"]), ("launch", ["model=["]), ("launch", ["model=gpt-9"]),
    ("plan", ["--bogus"]), ("plan", ["--csv"]), ("plan", ["condition=["]),
    ("rerun", []), ("rerun", ["somewhere", "causes=zzz"]),
    ("rejudge", []), ("rejudge", ["somewhere"]), ("rejudge", ["somewhere", "run.seed=1"]),
    ("rejudge", ["somewhere", "judge=["]),
    ("view", []), ("view", ["somewhere", "--port", "x"]),
    ("compare", []), ("compare", ["a", "b", "--adjust", "bonferroni"]), ("compare", ["a", "b", "--across", "stage"]),
    ("report", []), ("report", ["somewhere", "--latex=yes"]),
    ("compact", []), ("compact", ["a", "b"]),
    ("upload", []), ("upload", ["only-one"]),
    ("judge-check", []), ("judge-check", ["labels.csv"]),
]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- in this process ------------------------------------------------------------------------------

def test_the_console_script_is_the_cli_module():
    (script,) = entry_points(group="console_scripts", name="prefray")
    assert script.value == "prefray.cli:console"


def test_help_lists_every_command_with_its_summary(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert sorted(app.COMMANDS) == sorted(COMMANDS)
    for name in COMMANDS:
        (line,) = [line for line in out.splitlines() if line.split()[:1] == [name]]
        assert app.COMMANDS[name].summary.split()[0] in line


@pytest.mark.parametrize("command,args", BAD_ARGUMENTS)
def test_bad_arguments_exit_2_with_one_line(command, args, capsys):
    assert cli.main([command, *args]) == 2
    captured = capsys.readouterr()
    (line,) = lines(captured.err)
    assert line.startswith(f"prefray {command}: error: ") or line.startswith("prefray: "), line
    assert "usage:" not in captured.err and "Traceback" not in captured.err


def test_no_command_or_an_unknown_one_exits_2_with_one_line(capsys):
    for argv, said in (([], "name a command"), (["judge-me"], "invalid choice: 'judge-me'"),
                       (["--bogus"], "unrecognized arguments")):
        assert cli.main(argv) == 2
        (line,) = lines(capsys.readouterr().err)
        assert line.startswith("prefray: error: ") and said in line


def test_each_command_has_help_and_the_wrapper_is_the_same_command(capsys):
    import prefray.launch

    for name in COMMANDS:
        assert cli.main([name, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: prefray {name} ")
    assert prefray.launch.main(["--help"]) == 0  # in-process: an exit code, not SystemExit
    assert capsys.readouterr().out.startswith("usage: prefray launch ")   # the module alias names the command
    assert prefray.launch.main(["--bogus"]) == 2
    assert lines(capsys.readouterr().err) == [
        "prefray launch: error: unrecognized arguments: --bogus (--help shows the usage)"]


def test_the_command_modules_are_thin_and_import_no_other_command():
    """Each `python -m prefray.NAME` module imports prefray.app and nothing else of prefray."""
    import ast

    for name in ["launch", "plan", "rerun", "rejudge", "compact", "upload", "view/__main__", "compare", "report",
                 "judge_check"]:
        tree = ast.parse((ROOT / "prefray" / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert {m for m in imported if m.startswith("prefray")} == {"prefray"}, name
        assert all(alias.name == "app" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and node.module == "prefray" for alias in node.names), name


# what each command accepts as far as its parser goes (the work is replaced below)
PARSED = {"launch": [], "plan": [], "rerun": ["run"], "rejudge": ["run", "judge=fake"], "view": ["run"],
          "compact": ["run"], "upload": ["run", "s3://bucket/run"], "compare": ["run", "other"], "report": ["run"],
          "judge-check": ["labels.csv", "benchmark=cupid", "judge=fake"]}


@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_in_any_command_is_exit_130_and_one_line(command, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(app.COMMANDS[command].module, "run", interrupted)
    monkeypatch.setattr(sys, "argv", ["prefray", command, *PARSED[command]])
    handler = signal.getsignal(signal.SIGINT)
    try:
        for runner in (lambda: app.run(command, PARSED[command]), cli.console):  # python -m prefray.NAME, prefray
            assert runner() == 130
            (line,) = lines(capsys.readouterr().err)
            assert line.startswith("prefray: ") and "interrupted" in line
            if command in ("compact", "upload"):
                assert f"run the same {command} command again" in line
    finally:
        signal.signal(signal.SIGINT, handler)  # the runner ignores a second Ctrl-C from then on


# -- as processes ---------------------------------------------------------------------------------

@pytest.mark.e2e
def test_as_processes_help_lists_the_commands_and_bad_arguments_exit_2_with_one_line():
    """`prefray --help` lists the commands and `prefray launch --help` is `python -m prefray.launch
    --help`; each `python -m prefray.NAME` module's own __main__ refuses `--bogus` with exit 2 and one
    line (`prefray NAME`: in-process above); a malformed override is exit 2 and one line. The
    processes run at once."""
    python = [sys.executable, "-m"]
    top, sub, module, malformed, *bogus = run_together(
        [*python, "prefray", "--help"], [*python, "prefray", "launch", "--help"],
        [*python, "prefray.launch", "--help"], [*python, "prefray", "launch", "model=["],
        *([*python, f"prefray.{command.replace('-', '_')}", "--bogus"] for command in COMMANDS))

    assert top.returncode == 0, top.stderr
    for name in COMMANDS:
        assert any(line.split()[:1] == [name] for line in top.stdout.splitlines()), name
    assert sub.returncode == module.returncode == 0, sub.stderr + module.stderr
    # the same text: the module alias teaches the command's name
    assert sub.stdout.startswith("usage: prefray launch ")
    assert sub.stdout == module.stdout
    assert "config groups" in module.stdout and "prefray rerun" in module.stdout
    assert "python -m" not in module.stdout

    assert malformed.returncode == 2
    (line,) = lines(malformed.stderr)
    assert line.startswith("prefray: cannot read overrides: ") and "hydra.cc" in line  # Hydra's two lines, joined

    for command, done in zip(COMMANDS, bogus):
        assert done.returncode == 2, (command, done.stderr)
        (line,) = lines(done.stderr)  # what argparse says first: a missing argument, or the unknown flag
        assert line.startswith(f"prefray {command}: error: ") and line.endswith("(--help shows the usage)")


# A shell starts background jobs with SIGINT ignored, and a child inherits that: the command takes
# SIGINT back as a terminal's foreground command has it, wherever the suite runs.
AS_FOREGROUND = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "runpy.run_module('prefray', run_name='__main__', alter_sys=True)")


def start_prefray(*args: str) -> subprocess.Popen:
    """`prefray ARGS` in its own process group, taking Ctrl-C as a foreground command does."""
    return subprocess.Popen([sys.executable, "-c", AS_FOREGROUND, *args], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def interrupt(process: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C (SIGINT to the whole group, as a terminal sends it); the output once it has ended."""
    try:
        assert process.poll() is None, "the command ended before it could be interrupted"
        os.killpg(process.pid, signal.SIGINT)
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "condition not reached"
        time.sleep(0.1)


@pytest.mark.e2e
def test_ctrl_c_during_a_rejudge_exits_130_with_one_line(run_cli, fake_server, make_fake_server, tmp_path):
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *fake_server.model_overrides(), f"run.dir={run_dir}", "limit=2",
            "benchmark.samples=1", "run.plots=false")
    slow = make_fake_server("--latency", "0.6")  # the new judge answers one call at a time, slowly
    process = start_prefray("rejudge", str(run_dir), "judge=fake-anthropic", f"judge.base_url={slow.anthropic_url}",
                            "judge.max_concurrency=1", "run.cache=false")
    try:
        wait_for(lambda: slow.stats()["requests"] >= 1 or process.poll() is not None)
    finally:
        out, err = interrupt(process)
    assert process.returncode == 130, err
    (line,) = lines(err)
    assert "interrupted" in line and str(run_dir) in line and "rejudge" in line
    assert "Traceback" not in out + err


@pytest.mark.e2e
def test_ctrl_c_during_a_plan_exits_130_with_one_line(tmp_path):
    # the simulated plan of the whole suite takes minutes on two cores: it is still running after a few seconds
    process = start_prefray("plan", "--simulate", "-m", "model=all", "condition=all", "limit=1",
                            f"run.dir={tmp_path / 'never'}")
    time.sleep(6)
    out, err = interrupt(process)
    assert process.returncode == 130, err
    assert lines(err) == ["prefray: interrupted before any call; nothing was run"]
    assert "Traceback" not in out + err
    assert not (tmp_path / "never").exists()
