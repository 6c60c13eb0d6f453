"""What a rendered unit says about one stack: the only place stack fields become unit settings.

`unit_spec(stack, ...)` turns a `radiance.launcher.stack.Stack` into the flat values the jinja2
templates in `units/` print; `conflicts(stackfile)` derives which stacks cannot run together
(a shared GPU index or a shared port). vllm-switch reads the same two functions, so the units and
the switcher never disagree about names, ports, GPUs or conflicts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from radiance import paths
from radiance.healthchecks.cli import ready_argv
from radiance.launcher.locations import stack_paths
from radiance.launcher.mounts import container_mounts
from radiance.launcher.stack import Stack, StackFile

DEFAULT_HOST = "127.0.0.1"
# Model load + kernel build + graph compile of a 27B model took minutes in the field; be generous.
DEFAULT_START_TIMEOUT_S = 1800
# Grace vLLM gets after SIGTERM before podman/systemd kill it; TimeoutStopSec adds a margin on top.
DEFAULT_STOP_GRACE_S = 90
# A ready probe is one 1-token completion: every 30 s, 30 s to answer, 3 misses = unhealthy.
HEALTH_INTERVAL_S = 30
HEALTH_TIMEOUT_S = 30
HEALTH_RETRIES = 3
SHM_SIZE = "8g"


def unit_name(stack_name: str) -> str:
    return f"radiance-{stack_name}.service"


def vendor(stack: Stack) -> str:
    """rocm / nvidia / cpu, from the stack's arch."""
    if stack.arch == "cpu":
        return "cpu"
    if stack.arch.startswith("gfx"):
        return "rocm"
    if stack.arch.startswith("sm_"):
        return "nvidia"
    raise ValueError(f"stack {stack.name!r}: arch {stack.arch!r} has no known GPU vendor")


def bind_host(stack: Stack) -> str:
    return stack.host or DEFAULT_HOST


def start_timeout_s(stack: Stack) -> int:
    """TimeoutStartSec and vllm-switch's readiness window: the stack's field, else the default."""
    return stack.start_timeout_s or DEFAULT_START_TIMEOUT_S


def probe_url(stack: Stack) -> str:
    host = bind_host(stack)
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{stack.port}"


def _shares(a: Stack, b: Stack) -> list[str]:
    why = []
    if a.port == b.port:
        why.append(f"port {a.port}")
    gpus = sorted(set(a.devices) & set(b.devices))
    if gpus:
        why.append(f"GPU {','.join(map(str, gpus))}")
    return why


def conflicts(sf: StackFile) -> dict[str, dict[str, list[str]]]:
    """{stack: {other stack: [what they share]}} for every pair sharing a port or a GPU index."""
    out: dict[str, dict[str, list[str]]] = {name: {} for name in sf.stacks}
    names = sorted(sf.stacks)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            why = _shares(sf.stacks[a], sf.stacks[b])
            if why:
                out[a][b] = why
                out[b][a] = why
    return out


def default_launcher_bin() -> str:
    """Absolute path of radiance-launch (systemd does not search a venv's bin)."""
    beside = Path(sys.executable).parent / "radiance-launch"
    if beside.exists():
        return str(beside)
    found = shutil.which("radiance-launch")
    return found or "/usr/local/bin/radiance-launch"


@dataclass
class UnitSpec:
    name: str
    unit: str
    runtime: str
    vendor: str
    gpus: list[int]
    host: str
    port: int
    container: str
    image: str | None
    command: list[str]
    env: dict[str, str]
    mounts: list[str]
    device_args: list[str]
    quadlet_devices: list[str]
    labels: dict[str, str]
    conflicts: list[str]
    stop_first: list[str]  # conflicting units this one is ordered After= (one direction per pair)
    stacks_path: str
    podman: str
    start_timeout_s: int = DEFAULT_START_TIMEOUT_S
    stop_grace_s: int = DEFAULT_STOP_GRACE_S
    health_cmd: str = ""  # podman HEALTHCHECK: the ready probe run inside the container
    health_interval_s: int = HEALTH_INTERVAL_S
    health_timeout_s: int = HEALTH_TIMEOUT_S
    health_retries: int = HEALTH_RETRIES

    @property
    def writable_dirs(self) -> list[str]:
        """Host dirs of the writable mounts: podman does not create a missing bind source."""
        return [m.rsplit(":", 2)[0] for m in self.mounts if m.endswith(":rw")]

    @property
    def stop_timeout_s(self) -> int:
        return self.stop_grace_s + 30


def _devices(vend: str, gpus: list[int]) -> tuple[list[str], list[str], dict[str, str]]:
    """(podman run args, Quadlet lines, env) that pass the stack's GPUs into the container."""
    visible = ",".join(map(str, gpus))
    if vend == "rocm":
        return (["--device /dev/kfd", "--device /dev/dri", "--group-add video", "--ipc=host"],
                ["AddDevice=/dev/kfd", "AddDevice=/dev/dri", "GroupAdd=video", "PodmanArgs=--ipc=host"],
                {"HIP_VISIBLE_DEVICES": visible})
    # vLLM's shared-memory queues need more than podman's 64 MiB /dev/shm (ROCm gets --ipc=host).
    shm = ([f"--shm-size {SHM_SIZE}"], [f"ShmSize={SHM_SIZE}"])
    if vend == "nvidia":
        return (["--device nvidia.com/gpu=all", *shm[0]], ["AddDevice=nvidia.com/gpu=all", *shm[1]],
                {"CUDA_VISIBLE_DEVICES": visible})
    return shm[0], shm[1], {}


def unit_spec(sf: StackFile, name: str, *, mode: str = "prod", launcher_bin: str | None = None,
              podman_bin: str = "/usr/bin/podman") -> UnitSpec:
    stack = sf.get(name)
    stacks_path = str(Path(sf.path or "stacks.yaml").expanduser().absolute())
    vend = vendor(stack)
    dev_args, quadlet_devs, env = _devices(vend, list(stack.devices))
    env = {**env, **{k: str(v) for k, v in stack.env.items()}}
    others = conflicts(sf)[name]
    common = dict(
        start_timeout_s=start_timeout_s(stack),
        name=name, unit=unit_name(name), runtime=stack.runtime, vendor=vend, gpus=list(stack.devices),
        host=bind_host(stack), port=stack.port, container=stack.container_name, image=stack.image,
        conflicts=[unit_name(o) for o in sorted(others)],
        stop_first=[unit_name(o) for o in sorted(others) if o < name], stacks_path=stacks_path, podman=podman_bin,
        labels={"radiance.stack": name, "radiance.unit": unit_name(name), "radiance.port": str(stack.port)},
    )
    if stack.runtime == "native":
        cmd = [launcher_bin or default_launcher_bin(), name, "--mode", mode, "--stacks", stacks_path]
        return UnitSpec(command=cmd, env=env, mounts=[], device_args=[], quadlet_devices=[], **common)

    # podman: the launcher's identity mounts (host path = container path), so the stack file
    # means the same thing inside the container as on the host.
    sp = stack_paths(sf, stack, os.environ)
    env["RADIANCE_HOME"] = str(paths.home())
    mounts = [m.podman_arg() for m in container_mounts(sp)]
    cmd = ["radiance-launch", name, "--mode", mode, "--stacks", str(sp.stack_file)]
    # Steady-state probe only; the start window (model load + compile) is --health-start-period =
    # TimeoutStartSec, so a slow start is not counted as unhealthy (podman #27290).
    health = shlex.join(ready_argv(f"http://127.0.0.1:{stack.port}", stack.model_name, timeout_s=HEALTH_TIMEOUT_S))
    return UnitSpec(command=cmd, env=env, mounts=mounts, device_args=dev_args, quadlet_devices=quadlet_devs,
                    health_cmd=health, **common)
