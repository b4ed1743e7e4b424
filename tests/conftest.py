"""The helpers of tests/fixtures.py under the name tests import them by (`from tests.conftest import
launch_here`). The fixtures themselves are registered once for every test folder by the repository's
top-level conftest.py; nothing is defined here, so nothing is registered twice."""

from tests.fixtures import (
    ROOT,
    FakeServer,
    _port_open,
    command_here,
    free_port,
    launch,
    launch_here,
    refused_here,
    run_together,
    script_here,
    start_fake_server,
)

__all__ = ["ROOT", "FakeServer", "_port_open", "command_here", "free_port", "launch", "launch_here", "refused_here",
           "run_together", "script_here", "start_fake_server"]
