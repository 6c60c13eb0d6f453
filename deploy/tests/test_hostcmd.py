"""Every podman/systemctl call has a deadline: a hung tool fails the caller, it does not hang it.

A hung podman or systemd cannot be produced on demand, so FAKE ones stand in: scripts named
`podman` / `systemctl` first on PATH that never answer (`exec sleep`, as a tool blocked on a lock
would). Everything else is real: the subprocess, the process-group kill, vllm-switch's lock.
Seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from radiance import hostcmd
from radiance import podman_cli as podman
from radiance.deploy import systemd


@pytest.fixture
def hung(tmp_path, monkeypatch):
    """FAKE podman and systemctl that never answer, first on PATH; 1 s deadlines."""
    bin_dir = tmp_path / "hung-bin"
    bin_dir.mkdir()
    for tool in ("podman", "systemctl"):
        f = bin_dir / tool
        f.write_text("#!/bin/sh\nexec sleep 3600\n")
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(hostcmd, "QUERY_TIMEOUT_S", 1.0)
    return bin_dir


def test_a_tool_that_forks_is_killed_with_its_children():
    t = time.monotonic()
    with pytest.raises(hostcmd.HostCommandTimeout, match=r"`bash -c sleep 30 & sleep 30` did not finish within 0.5 s"):
        hostcmd.run(["bash", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert time.monotonic() - t < 5, "the backgrounded child kept the pipes open"


def test_hung_podman_and_systemctl_raise_within_their_deadline(hung):
    t = time.monotonic()
    with pytest.raises(hostcmd.HostCommandTimeout, match="podman container exists x"):
        podman.container_exists("x")
    with pytest.raises(hostcmd.HostCommandTimeout, match="systemctl show radiance-x.service"):
        systemd.state("radiance-x.service")
    assert time.monotonic() - t < 6


def test_a_hung_systemd_ends_the_switch_and_releases_its_lock(hung, tmp_path, monkeypatch):
    from radiance.deploy.switch import Phase, Switch
    from radiance.stack import bundled_example, load_stacks

    monkeypatch.setenv("RADIANCE_HOME", str(tmp_path / "home"))
    sf = load_stacks(bundled_example())
    out = Switch(sf, echo=lambda _m: None).run("demo")
    assert out.outcome == "timeout" and "did not finish within 1 s" in out.message, out.message
    assert out.phases[-1] is Phase.FAILED
    again = Switch(sf, lock_wait=0, echo=lambda _m: None).run("demo")  # the lock is free again: no SwitchBusy
    assert again.outcome == "timeout"
