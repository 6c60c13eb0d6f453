"""Everything vllm-switch can check about the target before it stops the stack that works.

A switch that stops a serving stack and then finds the target cannot start strands the user (the
rollback restarts the old one, minutes later). So before anything is stopped, `refusal(sf, target)`
checks, in order: the unit is installed and rendered for this RADIANCE_HOME, the API key file reads,
the GPU driver answers, the launch plan resolves (model directory, checkpoint format, chat
template, drafter, knobs: what `radiance-launch --dry-run` checks), and the vLLM that will serve is
inside radiance's tested range: a podman stack's image must be in podman's store and is asked for
its vLLM (`python3 -m radiance.compat` inside it); a native stack's launcher's interpreter is asked
the same. The first problem found is the refusal; None means go ahead.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

from radiance import apikey
from radiance import hostcmd
from radiance import podman_cli as podman
from radiance.deploy import gpus, hoststate, systemd
from radiance.deploy.unitspec import unit_name
from radiance.stack import StackFile, StackFileError

# An image or interpreter answers `python3 -m radiance.compat` in seconds; a container start may be slow.
COMPAT_TIMEOUT_S = 180.0


def _mode(argv: list[str]) -> str:
    """The launcher mode the unit runs (`--mode X` in its command; render's default otherwise)."""
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--mode"), "prod")


def _plan(sf: StackFile, target: str, argv: list[str]) -> str | None:
    from radiance.launcher.plan import PlanError, resolve_plan
    from radiance.launcher.template import TemplateError

    environ = {**os.environ, **systemd.environment(unit_name(target))}  # the unit's knobs, as it will see them
    try:
        resolve_plan(sf, target, _mode(argv), environ)
    except (StackFileError, PlanError, TemplateError) as e:
        return f"its launch would fail: {e}"
    return None


def _compat(argv: list[str], where: str) -> str | None:
    r = hostcmd.run(argv, timeout=COMPAT_TIMEOUT_S)
    if r.returncode == 0:
        return None
    out = (r.stderr or r.stdout).strip().splitlines()
    reason = out[-1].removeprefix("radiance: ") if out else f"exit {r.returncode}"
    return f"{where}: {reason}"


def _image(image: str) -> str | None:
    if not podman.available():
        return "podman is not installed here, and the stack runs in podman"
    if not podman.image_exists(image):
        return (f"its image {image} is not in podman's store: build it (`radiance setup`, images/) or "
                f"`podman pull` it")
    return _compat(["podman", "run", "--rm", "--network=none", "--entrypoint", "python3", image,
                    "-m", "radiance.compat", image], f"its image {image} cannot serve it")


def _launcher_vllm(argv: list[str]) -> str | None:
    """The native unit's launcher's own interpreter (the console script's #! line), asked for its vLLM."""
    exe = Path(argv[0]) if argv else None
    if exe is None or exe.name != "radiance-launch":
        return None  # the unit runs something else (an operator's drop-in): nothing of radiance's to ask
    try:
        first = exe.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return f"its launcher {exe} cannot be read"
    interp = shlex.split(first.removeprefix("#!"))[0] if first.startswith("#!") else ""
    if not interp:
        return f"its launcher {exe} has no #! line naming its Python"
    return _compat([interp, "-m", "radiance.compat"], f"its launcher {exe} cannot serve it")


def refusal(sf: StackFile, target: str, views: dict[str, hoststate.StackView],
            key: Callable[[str], object]) -> str | None:
    """Why the switch to `target` must not stop anything, or None. `key` reads the stack's API key."""
    t, view = sf.get(target), views[target]
    if view.state.load != "loaded":
        return (f"{view.unit} is {view.state.load or 'not loaded'} in systemd: install the units first "
                f"(`radiance setup` or `radiance render --out /etc/systemd/system` + `systemctl daemon-reload`)")
    why = hoststate.unit_home_mismatch(sf, target)
    if why:
        return why
    try:
        key(target)
    except apikey.ApiKeyError as e:
        return f"{target}: {e}"
    try:  # the release wait reads the driver; find out now that it can, not after stopping a stack
        gpus.users(t.vendor, sorted(set(t.devices)))
    except gpus.GpuQueryError as e:
        return f"cannot read which processes hold GPU {','.join(map(str, t.devices))} memory: {e}"
    argv = systemd.exec_argv(view.unit)
    why = _plan(sf, target, argv)
    if why:
        return f"{target}: {why}"
    why = _image(t.image) if t.runtime == "podman" and t.image else _launcher_vllm(argv)
    return f"{target}: {why}" if why else None
