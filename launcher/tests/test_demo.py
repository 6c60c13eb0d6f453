"""scripts/demo's helpers (the real serve is exercised by test_launch_real.py through the same helpers)."""

import socket
import sys
from pathlib import Path

from radiance.launcher import demo


def test_port_free_sees_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not demo.port_free("127.0.0.1", port)
    assert demo.port_free("127.0.0.1", port)


def test_launcher_command_uses_this_interpreters_radiance_launch(tmp_path):
    cmd = demo.launcher_command(tmp_path / "s.yaml", "prod")
    assert cmd[-5:] == ["demo", "--stacks", str(tmp_path / "s.yaml"), "--mode", "prod"]
    assert Path(cmd[0]).parent == Path(sys.executable).parent or cmd[0] == sys.executable
