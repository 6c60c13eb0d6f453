"""A container with systemd as PID 1 (a "box") for tests of units, vllm-switch and Quadlet.

`running_box(image, *podman_args)` starts `/sbin/init` in a podman container, waits until systemd
is up and yields a `Box`; the container is always removed. Commands go through the podman CLI
(podman-py's exec leaves conmon processes waiting). The box's units are real units run by a
real systemd: `Box.show` reads their properties, `Box.wait_unit` polls them, `Box.drop_in` adds a
drop-in and reloads, `Box.reboot` restarts the container (systemd boots again).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

from radiance.testing.podman import podman, remove_container


class Box:
    def __init__(self, name: str) -> None:
        self.name = name

    def sh(self, cmd: str, check: bool = True, timeout: float = 120, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess:
        envs = [f"--env={k}={v}" for k, v in (env or {}).items()]
        r = subprocess.run(["podman", "exec", *envs, self.name, "bash", "-c", cmd], capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"`{cmd}` exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def write(self, path: str, text: str) -> None:
        self.sh(f"mkdir -p $(dirname {path}) && cat > {path} <<'BOX_EOF'\n{text}BOX_EOF")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """The unit's ActiveState, SubState, NRestarts, Result and `props`, as systemd reports them."""
        props = ("ActiveState", "SubState", "NRestarts", "Result", *props)
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_unit(self, unit: str, done: Callable[[dict[str, str]], bool], timeout: float, *props: str,
                  what: str = "") -> dict[str, str]:
        """Poll the unit's properties (ActiveState, SubState, NRestarts, Result + `props`) until `done`."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.show(unit, *props)
            if done(st):
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"{unit}: {what or 'condition'} not reached within {timeout:g}s; last {st}\n"
                                     f"{self.journal(unit, 40)}")
            time.sleep(0.5)

    def journal(self, unit: str, lines: int = 200) -> str:
        return self.sh(f"journalctl -u {unit} -n {lines} --no-pager -o cat", check=False).stdout

    def booted(self, timeout: float) -> None:
        """Wait until systemd has finished booting, then do what systemd does at boot on a host but
        not in a container: make / a shared mount. Credentials of a unit with a non-root User= are
        mounted in a child namespace and moved into place; under podman's private propagation they
        never reach the service (an empty $CREDENTIALS_DIRECTORY)."""
        deadline = time.monotonic() + timeout
        while (st := self.sh("systemctl is-system-running", check=False).stdout.strip()) not in ("running", "degraded"):
            assert time.monotonic() < deadline, f"{self.name}: boot not finished within {timeout:g} s ({st})"
            time.sleep(0.5)
        self.sh("mount --make-rshared /")

    def reboot(self, timeout: float = 180) -> None:
        """Restart the container: systemd shuts down and boots again (generators, targets and all) on
        the same filesystem, as after a host reboot. Returns once the boot has finished."""
        podman("restart", "--time", "60", self.name, timeout=timeout)
        self.booted(timeout)

    def checkpoints(self, models: str, *names: str, quant: str = "paroquant") -> None:
        """Shape-only checkpoints (zero weights, a bundled chat template) under `models` in the box: what
        a test stack's launch plan checks (vllm-switch refuses a target whose plan fails)."""
        self.sh(f"python3 -c 'import sys; from pathlib import Path; "
                f"from radiance.testing.shape_only import write_zero_checkpoint as w; "
                f"[w(Path(sys.argv[1]) / m, \"{quant}\", chat_template=\"{{{{ messages }}}}\") for m in sys.argv[2:]]' "
                f"{models} {' '.join(names)}")

    def exporter_metrics(self, port: int, until: str, *args: str, timeout: float = 60) -> str:
        """Run the real `radiance exporter` in the box until its /metrics holds `until`; that text."""
        self.sh(f"nohup radiance exporter --port {port} {' '.join(args)} > /tmp/exporter-{port}.log 2>&1 & "
                f"echo $! > /tmp/exporter-{port}.pid")
        try:
            deadline, text = time.monotonic() + timeout, ""
            while until not in text:
                assert time.monotonic() < deadline, self.sh(f"cat /tmp/exporter-{port}.log", check=False).stdout
                time.sleep(0.5)
                text = self.sh(f"curl -s localhost:{port}/metrics", check=False).stdout
            return text
        finally:
            self.sh(f"kill $(cat /tmp/exporter-{port}.pid)", check=False)

    def service_user(self) -> str:
        """`radiance setup --system`'s step that creates the user native units run as (its report)."""
        return self.sh("python3 -c 'from radiance.deploy import layout, setup; layout.use_system(); "
                       "from radiance.stack import load_stacks; sf = load_stacks(); "
                       "print(setup.service_user(sf, sorted(sf.stacks), False))'").stdout

    def drop_in(self, unit: str, text: str, name: str = "10-test.conf", base: str = "/etc/systemd/system") -> None:
        self.write(f"{base}/{unit}.d/{name}", text)
        self.sh("systemctl daemon-reload")


@contextlib.contextmanager
def running_box(image: str, *podman_args: str, prefix: str = "radiance-box", boot_s: float = 60,
                cgroupns: str = "private") -> Iterator[Box]:
    """`cgroupns` private: systemd sees its cgroups where it created them (the Quadlet box, whose
    podman makes cgroups of its own, needs `host`)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        # SYS_ADMIN: systemd builds a sandboxed unit's mount namespace (ProtectSystem=, PrivateTmp=, ...);
        # without it, it skips them without a word and a sandbox test would test nothing. SYS_PTRACE:
        # root reads the sockets of processes of other users (vllm-switch naming a port's holder), as
        # on a host.
        podman("run", "-d", "--name", name, "--systemd=always", f"--cgroupns={cgroupns}", "--cap-add=SYS_ADMIN",
               "--cap-add=SYS_PTRACE", *podman_args, image, "/sbin/init")
        box = Box(name)
        box.booted(boot_s)
        yield box
    finally:
        remove_container(name)
