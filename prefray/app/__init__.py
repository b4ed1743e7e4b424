"""The work of every prefray command.

`prefray COMMAND ...` (prefray.cli) and its alias, the module prefray/COMMAND.py run with `-m` (thin
wrappers that import nothing else of prefray) both come here: `run` for a process's exit code
(through the one CLI runner: Ctrl-C is one line and 130), `main` for the same in-process. Each
command is a module here with `parser(prog)` and `run(args)`; `commands` lists them and runs them.
"""

from prefray.app.commands import COMMANDS, Command, main, run, run_process

__all__ = ["COMMANDS", "Command", "main", "run", "run_process"]
