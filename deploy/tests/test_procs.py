"""Port holders and process names read from /proc, against real sockets and processes (milliseconds)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from radiance.deploy import procs


def test_port_holder_is_this_process():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    assert not procs.port_in_use(port)  # bound but not listening: not a server
    s.listen()
    try:
        holders = procs.port_holders(port)
        assert [h.pid for h in holders] == [__import__("os").getpid()]
        assert holders[0].describe().startswith(f"PID {holders[0].pid} (")
    finally:
        s.close()
    assert procs.port_holders(port) == []


def test_process_names_a_pid_and_says_when_it_cannot():
    me = procs.process(os.getpid())
    assert me.pid == os.getpid() and me.name == Path("/proc/self/comm").read_text().strip()
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert procs.process(gone.pid).name == "not visible in /proc"


def test_unit_from_cgroup():
    h = procs.Holder(1, "python3", "/libpod_parent/libpod-abc/system.slice/radiance-alpha.service")
    assert h.unit() == "radiance-alpha.service"
    assert procs.Holder(2, "bash", "/user.slice").unit() is None
