"""Port and device holders read from /proc, against real sockets and open files (milliseconds)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from radiance.deploy import gpus, procs


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


def test_file_holders_names_the_process_with_the_node_open(tmp_path):
    node = tmp_path / "fake-kfd"
    node.write_text("")
    child = subprocess.Popen([sys.executable, "-c", f"f = open({str(node)!r}); import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while not procs.file_holders([str(node)]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [h.pid for h in procs.file_holders([str(node)])] == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert procs.file_holders([str(node)]) == []


def test_gpu_nodes_per_vendor(tmp_path):
    assert gpus.device_nodes("rocm", [0, 1], tmp_path) == [str(tmp_path / "kfd")]
    assert gpus.device_nodes("nvidia", [1], tmp_path) == [str(tmp_path / "nvidia1")]
    assert gpus.device_nodes("cpu", []) == []
    assert gpus.gpu_holders("rocm", [0], tmp_path) == []  # no such node here: nothing holds it


def test_unit_from_cgroup():
    h = procs.Holder(1, "python3", "/libpod_parent/libpod-abc/system.slice/radiance-alpha.service")
    assert h.unit() == "radiance-alpha.service"
    assert procs.Holder(2, "bash", "/user.slice").unit() is None
