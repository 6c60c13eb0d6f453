"""What a rendered unit says about one stack: the only place stack fields become unit settings.

`unit_spec(stack, ...)` turns a `radiance.stack.Stack` into the flat values the jinja2
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

from radiance import apikey, paths
from radiance.deploy.layout import current as current_layout
from radiance.deploy.sandbox import Sandbox, launcher_visible, native_sandbox
from radiance.probe import health_argv, ready_argv
from radiance.locations import stack_paths
from radiance.launcher.device import gpu_env
from radiance.launcher.mounts import container_mounts
from radiance.stack import Stack, StackFile, vendor

DEFAULT_HOST = "127.0.0.1"
# Model load + kernel build + graph compile of a 27B model took minutes in the field; be generous.
DEFAULT_START_TIMEOUT_S = 1800
# systemd's TimeoutStartSec is the ready window plus this, so the ready probe (ExecStartPost) gives
# up first and its reason, not "start operation timed out", is what the journal shows.
START_MARGIN_S = 60
READY_INTERVAL_S = 2  # the start's probe: /health until vLLM listens, then one 1-token completion
# Grace vLLM gets after SIGTERM before podman/systemd kill it; TimeoutStopSec adds a margin on top.
DEFAULT_STOP_GRACE_S = 90
STOP_MARGIN_S = 30
# The health probe (live and making progress: an idle server answers a 1-token completion, a busy
# one moves its token counters): every 30 s, 30 s to answer, 3 misses = unhealthy. The probe's own
# deadline is what bounds it: podman did not kill a hung health command at --health-timeout
# (podman 5.4, seen in the Quadlet test).
HEALTH_INTERVAL_S = 30
HEALTH_TIMEOUT_S = 30
HEALTH_RETRIES = 3
# Bounded restarts: radiance-launch exits 2 for a configuration error (stack file, plan, chat
# template, key file), which no restart can fix; anything else is retried, at most
# START_LIMIT_BURST starts within that many start windows (then systemd's `start-limit-hit`).
CONFIG_ERROR_EXIT = 2
RESTART_SEC = 15
START_LIMIT_BURST = 3
SHM_SIZE = "8g"
# Containers run as this user (images/Containerfile.* create it) where the GPU permits: CPU and
# NVIDIA (CDI devices are world-usable); ROCm stays root, /dev/kfd and /dev/dri need the host's
# video/render group ids inside.
CONTAINER_USER = "10001:10001"
SECRET_TARGET = apikey.ENV_VAR


def unit_name(stack_name: str) -> str:
    return f"radiance-{stack_name}.service"



def bind_host(stack: Stack) -> str:
    return stack.host or DEFAULT_HOST


def start_timeout_s(stack: Stack) -> int:
    """TimeoutStartSec and vllm-switch's readiness window: the stack's field, else the default."""
    return stack.start_timeout_s or DEFAULT_START_TIMEOUT_S


def stop_timeout_s(stack: Stack) -> int:
    """TimeoutStopSec: vLLM's SIGTERM grace plus a margin for podman and systemd."""
    return DEFAULT_STOP_GRACE_S + STOP_MARGIN_S


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


def watchdog_unit(stack_name: str) -> str:
    return f"radiance-watchdog@{stack_name}.service"


def secret_name(stack_name: str) -> str:
    """The podman secret a podman stack's API key is handed to its container through."""
    return f"radiance-{stack_name}-api-key"


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
    env: dict[str, str]  # native: the server's environment; podman: the container's (--env)
    unit_env: dict[str, str]  # the unit's own (layout): what ExecStartPost and the launcher resolve paths with
    directories: list[str]  # StateDirectory= / CacheDirectory= of the system layout
    mounts: list[str]
    device_args: list[str]
    quadlet_devices: list[str]
    labels: dict[str, str]
    conflicts: list[str]
    stop_first: list[str]  # conflicting units this one is ordered After= (one direction per pair)
    stacks_path: str
    podman: str
    radiance_bin: str  # the host's `radiance` (the ready probe after start, the watchdog)
    ready_cmd: list[str]  # ExecStartPost: wait for the ready probe (the API key is appended by the template)
    api_key_file: str | None = None  # host path, loaded as the systemd credential apikey.CREDENTIAL
    user: str | None = None  # container user (podman)
    sandbox: Sandbox | None = None  # a native stack's: User=, ProtectSystem=, ReadWritePaths=, DeviceAllow=
    start_timeout_s: int = DEFAULT_START_TIMEOUT_S
    stop_grace_s: int = DEFAULT_STOP_GRACE_S
    health_cmd: str = ""  # podman HEALTHCHECK: the health probe run inside the container
    health_interval_s: int = HEALTH_INTERVAL_S
    health_timeout_s: int = HEALTH_TIMEOUT_S
    health_retries: int = HEALTH_RETRIES
    restart_sec: int = RESTART_SEC
    start_limit_burst: int = START_LIMIT_BURST
    config_error_exit: int = CONFIG_ERROR_EXIT

    @property
    def writable_dirs(self) -> list[str]:
        """Host dirs of the writable mounts: podman does not create a missing bind source."""
        return [m.split(":")[0] for m in self.mounts if m.split(":")[2].split(",")[0] == "rw"]

    @property
    def publish(self) -> str:
        """podman's --publish / Quadlet's PublishPort: HOST:PORT:PORT, an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}:{self.port}"

    @property
    def stop_timeout_s(self) -> int:
        return self.stop_grace_s + STOP_MARGIN_S

    @property
    def start_total_s(self) -> int:
        """TimeoutStartSec: the ready window plus the margin that lets the probe report first."""
        return self.start_timeout_s + START_MARGIN_S

    @property
    def start_limit_interval_s(self) -> int:
        """StartLimitIntervalSec: START_LIMIT_BURST whole start attempts (window + restart delay)."""
        return self.start_limit_burst * (self.start_total_s + self.restart_sec)

    @property
    def secret(self) -> str:
        return secret_name(self.name)

    @property
    def secret_create(self) -> str:
        """Shell command making the key file a podman secret. The key is stripped as radiance.apikey
        reads it: a trailing newline would be part of the server's key and no client would match."""
        if not self.api_key_file:
            return ""
        return (f"tr -d '[:space:]' < {shlex.quote(self.api_key_file)} | {shlex.quote(self.podman)} secret create "
                f"{self.secret} -")

    @property
    def watchdog(self) -> str:
        return watchdog_unit(self.name)


def _devices(arch: str, gpus: list[int]) -> tuple[list[str], list[str], dict[str, str]]:
    """(podman run args, Quadlet lines, env) that pass the stack's GPUs into the container. The env
    (launcher/device.gpu_env) is the launcher's own for a launch by hand: CUDA in PCI bus order (the
    order NVML is read in, gpu_nvml.py), so `devices` mean the same GPUs to vLLM and vllm-switch."""
    env = gpu_env(arch, gpus)
    if vendor(arch) == "rocm":
        return (["--device /dev/kfd", "--device /dev/dri", "--group-add video", "--ipc=host"],
                ["AddDevice=/dev/kfd", "AddDevice=/dev/dri", "GroupAdd=video", "PodmanArgs=--ipc=host"], env)
    # vLLM's shared-memory queues need more than podman's 64 MiB /dev/shm (ROCm gets --ipc=host).
    shm = ([f"--shm-size {SHM_SIZE}"], [f"ShmSize={SHM_SIZE}"])
    if vendor(arch) == "nvidia":
        return ["--device nvidia.com/gpu=all", *shm[0]], ["AddDevice=nvidia.com/gpu=all", *shm[1]], env
    return shm[0], shm[1], env


def _labelled(mount: str, own_cache: Path) -> str:
    """SELinux label option of a mount: private (`Z`) for the stack's own caches, shared (`z`) for
    what several stacks or the host read (models, the stack file, state records)."""
    path = mount.split(":")[0]
    private = path == str(own_cache) or path.startswith(str(own_cache) + "/")
    return f"{mount},{'Z' if private else 'z'}"


def unit_spec(sf: StackFile, name: str, *, mode: str = "prod", launcher_bin: str | None = None,
              podman_bin: str = "/usr/bin/podman") -> UnitSpec:
    stack = sf.get(name)
    stacks_path = str(Path(sf.path or "stacks.yaml").expanduser().absolute())
    vend = stack.vendor
    dev_args, quadlet_devs, env = _devices(stack.arch, list(stack.devices))
    env = {**env, **{k: str(v) for k, v in stack.env.items()}}
    layout = current_layout()
    launcher = launcher_bin or default_launcher_bin()
    radiance_bin = str(Path(launcher).with_name("radiance"))
    sp = stack_paths(sf, stack, os.environ)
    others = conflicts(sf)[name]
    ready = ready_argv(probe_url(stack), stack.model_name, timeout_s=HEALTH_TIMEOUT_S, wait_s=start_timeout_s(stack),
                       interval_s=READY_INTERVAL_S, stack=name, exe=radiance_bin)
    common = dict(
        start_timeout_s=start_timeout_s(stack),
        name=name, unit=unit_name(name), runtime=stack.runtime, vendor=vend, gpus=list(stack.devices),
        host=bind_host(stack), port=stack.port, container=stack.container_name, image=stack.image,
        conflicts=[unit_name(o) for o in sorted(others)],
        stop_first=[unit_name(o) for o in sorted(others) if o < name], stacks_path=stacks_path, podman=podman_bin,
        labels={"radiance.stack": name, "radiance.unit": unit_name(name), "radiance.port": str(stack.port)},
        # a native unit's user owns only what it writes (deploy/sandbox.py): no StateDirectory= chown
        unit_env=layout.env, directories=layout.directories if stack.runtime == "podman" else [],
        radiance_bin=radiance_bin, ready_cmd=ready,
        api_key_file=str(sp.api_key_file) if sp.api_key_file else None,
    )
    if stack.runtime == "native":
        launcher_visible(name, launcher)
        cmd = [launcher, name, "--mode", mode, "--stacks", stacks_path]
        return UnitSpec(command=cmd, env=env, mounts=[], device_args=[], quadlet_devices=[],
                        sandbox=native_sandbox(stack, sp, layout.system), **common)

    # podman: the launcher's identity mounts (host path = container path), so the stack file
    # means the same thing inside the container as on the host.
    env.update(layout.env)
    own_cache = paths.stack_cache_dir(name)
    mounts = [_labelled(m.podman_arg(), own_cache) for m in container_mounts(sp)]
    cmd = ["radiance-launch", name, "--mode", mode, "--stacks", str(sp.stack_file)]
    # Steady-state probe only; the start window (model load + compile) is --health-start-period =
    # the ready window, so a slow start is not counted as unhealthy (podman #27290).
    health = shlex.join(health_argv(f"http://127.0.0.1:{stack.port}", stack.model_name, timeout_s=HEALTH_TIMEOUT_S,
                                    api_key_env=SECRET_TARGET if sp.api_key_file else None))
    return UnitSpec(command=cmd, env=env, mounts=mounts, device_args=dev_args, quadlet_devices=quadlet_devs,
                    health_cmd=health, user=None if vend == "rocm" else CONTAINER_USER, **common)
