"""`radiance setup`: bring this host to the state the stack file needs, idempotently.

Steps, each reporting ok (nothing to do), changed (did it), missing (cannot do it here: says what to
do) or skipped (not needed by these stacks): host check (GPU devices and driver, podman, systemd,
disk), images (images/Containerfile.*), checkpoints and drafters (placed from their `source`
(place.py); their structure checked (radiance.checkpoint); sha256 against the model dir's
SHA256SUMS, which `record=True` writes where there is none, as for a downloaded checkpoint),
kernels prebuilt into the cache, units rendered and installed (+ daemon-reload). `check=True`
reports what a run would do and changes nothing. Verified checksums are remembered by (path, size,
mtime) in the state dir, so a second run does not re-read 20 GB checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from radiance import atomic, hostcmd, paths
from radiance.checkpoint import CheckpointError
from radiance.checkpoint import verify as inspect
from radiance.checksums import MANIFEST, Progress, read_manifest, sha256_file, write_manifest
from radiance.deploy import place as place_mod
from radiance import podman_cli as podman_mod
from radiance.deploy import gpu_kfd, gpu_nvml, systemd
from radiance.deploy.gpus import GpuQueryError
from radiance.deploy.unitspec import CONTAINER_USER
from radiance.locations import model_path
from radiance.stack import StackFile

MIN_FREE_GB = 20.0
KERNEL_BUILD_TIMEOUT_S = 3600.0  # hipcc for every gfx1201 kernel takes minutes, never an hour


@dataclass(frozen=True)
class Step:
    name: str
    status: str  # ok / changed / missing / skipped
    detail: str




def _gpu_check(vendors: set[str], dev: Path = Path("/dev")) -> list[Step]:
    steps = []
    if "rocm" in vendors:
        if not (dev / "kfd").exists():
            steps.append(Step("gpu: rocm", "missing", "no AMD GPU: /dev/kfd is missing (amdgpu driver not loaded "
                                                      "or no card); the gfx1201 stacks cannot run here"))
        else:
            ver = Path("/sys/module/amdgpu/version")
            try:
                n = len(gpu_kfd.gpu_nodes())
                steps.append(Step("gpu: rocm", "ok", f"/dev/kfd present, amdgpu "
                                                     f"{ver.read_text().strip() if ver.exists() else 'in-kernel'}, "
                                                     f"KFD lists {n} GPU(s)"))
            except GpuQueryError as e:
                steps.append(Step("gpu: rocm", "missing", str(e)))
    if "nvidia" in vendors:
        ver = Path("/proc/driver/nvidia/version")
        if not (dev / "nvidia0").exists() or not ver.exists():
            steps.append(Step("gpu: nvidia", "missing", "no NVIDIA GPU: /dev/nvidia0 or /proc/driver/nvidia/version "
                                                        "is missing (driver not loaded or no card)"))
        else:
            try:  # vllm-switch reads GPU memory users through NVML
                steps.append(Step("gpu: nvidia", "ok", gpu_nvml.describe()))
            except GpuQueryError as e:
                steps.append(Step("gpu: nvidia", "missing", str(e)))
    return steps


def host_check(sf: StackFile, names: list[str]) -> list[Step]:
    stacks = [sf.get(n) for n in names]
    steps = _gpu_check({s.vendor for s in stacks} - {"cpu"})
    if any(s.runtime == "podman" for s in stacks):
        ver = podman_mod.version()
        if ver is None:
            steps.append(Step("podman", "missing", "podman is not installed or does not answer (apt-get install podman runc)"))
        else:
            q = ("Quadlet: .container units" if podman_mod.has_quadlet(ver) else
                 f"plain .service units (Quadlet from podman {'.'.join(map(str, podman_mod.QUADLET_MIN_VERSION))})")
            steps.append(Step("podman", "ok", f"podman {ver}; {q}"))
    why = systemd.available()
    steps.append(Step("systemd", "ok" if why is None else "missing",
                      "systemd is PID 1" if why is None else f"{why}: units can be rendered but not run"))
    home = paths.home()
    probe = home if home.exists() else next(p for p in home.parents if p.exists())
    free = shutil.disk_usage(probe).free / 2**30
    steps.append(Step("disk", "ok" if free >= MIN_FREE_GB else "missing",
                      f"{free:.0f} GiB free under {probe} (need >= {MIN_FREE_GB:.0f} GiB for checkpoints and caches)"))
    return steps


# ---- images -------------------------------------------------------------------------------------

def images(sf: StackFile, names: list[str], check: bool, say: Callable[[str], None]) -> list[Step]:
    from radiance.images.build import ImageBuildError, build

    wanted: dict[str, str] = {}  # image tag -> flavor
    for n in names:
        s = sf.get(n)
        if s.runtime == "podman" and s.image:
            wanted.setdefault(s.image, {"rocm": "rocm", "nvidia": "cuda", "cpu": "cpu"}[s.vendor])
    if not wanted:
        return [Step("images", "skipped", "no podman stacks")]
    if podman_mod.version() is None:
        return [Step(f"image {t}", "missing", "podman is not installed") for t in wanted]
    steps = []
    for tag, flavor in sorted(wanted.items()):
        try:
            b = build(flavor, tag=tag, say=say, check=check)
        except ImageBuildError as e:
            steps.append(Step(f"image {tag}", "missing", str(e).splitlines()[0]))
            continue
        if not b.built:
            steps.append(Step(f"image {tag}", "ok", f"{b.ref} is current"))
        else:
            steps.append(Step(f"image {tag}", "missing" if check else "changed",
                              f"{'would build' if check else 'built'} {b.ref} from Containerfile.{flavor}"))
    return steps


# ---- checkpoints --------------------------------------------------------------------------------

def _verified_path() -> Path:
    return paths.state_dir() / "setup" / "verified.json"


def _known() -> dict[str, str]:
    return json.loads(_verified_path().read_text()) if _verified_path().exists() else {}


def _stamp(f: Path, digest: str) -> str:
    st = f.stat()
    return f"{st.st_size}:{st.st_mtime_ns}:{digest}"


def _remember(fresh: dict[str, str]) -> None:
    atomic.write_text(_verified_path(), json.dumps({**_known(), **fresh}, indent=1, sort_keys=True))


def _manifest(d: Path, check: bool, progress: Progress | None) -> tuple[str, str]:
    """Every file listed in SHA256SUMS against its digest (remembered by size and mtime)."""
    known = _known()
    bad, fresh = [], {}
    try:
        entries = read_manifest(d)
    except ValueError as e:
        return "missing", str(e)
    for digest, f in entries:
        if not f.is_file():
            bad.append(f"{f.name} missing")
            continue
        stamp = _stamp(f, digest)
        if known.get(str(f)) == stamp:
            continue
        if sha256_file(f, progress) != digest:
            bad.append(f"{f.name} sha256 mismatch")
        else:
            fresh[str(f)] = stamp
    if bad:
        return "missing", f"{d}: " + ", ".join(bad)
    if fresh and not check:
        _remember(fresh)
    return "ok", f"{len(entries)} files match {MANIFEST}" + (f" ({len(fresh)} newly hashed)" if fresh else "")


def verify_checkpoint(d: Path, quant: str | None, check: bool, record: bool = False,
                      progress: Progress | None = None) -> tuple[str, str]:
    """(status, detail) for one checkpoint dir: its structure (radiance.checkpoint.verify: config,
    quant method, safetensors headers and index, the format's tensor shapes), then its SHA256SUMS
    where it has one; without one, `record` writes it (a downloaded checkpoint has none)."""
    if not d.is_dir():
        return "missing", (f"{d} does not exist; put the checkpoint there (radiance fetch-model / quantize), "
                           "or give the stack a `source` to place it from")
    try:
        report = inspect(d, quant)
    except CheckpointError as e:
        return "missing", str(e)
    if report.problems:
        more = len(report.problems) - 3
        return "missing", "; ".join(report.problems[:3]) + (f" (and {more} more)" if more > 0 else "")
    if (d / MANIFEST).is_file():
        status, detail = _manifest(d, check, progress)
        return status, f"{d}: {report.summary()}; {detail}" if status == "ok" else detail
    if not record:
        return "ok", (f"{d}: {report.summary()}; no {MANIFEST} to check the bytes against: `radiance setup "
                      f"--record` records one that later runs verify")
    if check:
        return "missing", f"{d}: {report.summary()}; would record {MANIFEST} (--record)"
    entries = read_manifest(write_manifest(d, progress).parent)
    _remember({str(f): _stamp(f, digest) for digest, f in entries})  # just hashed: the next run reads nothing
    return "changed", f"{d}: {report.summary()}; recorded {MANIFEST} over {len(entries)} files"


def unreadable_by_others(d: Path) -> list[str]:
    """Files of `d` a container's non-root user cannot read (safetensors writes 0600)."""
    if not d.is_dir():
        return []
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and not p.stat().st_mode & 0o004)


@dataclass
class _Wanted:
    label: str
    quant: str | None  # the stack's method for a model; None for a drafter (any format)
    source: str | None
    non_root: bool = False  # read inside a container by CONTAINER_USER


def _wanted(sf: StackFile, names: list[str]) -> dict[Path, _Wanted]:
    out: dict[Path, _Wanted] = {}
    for n in names:
        s = sf.get(n)
        parts = [(model_path(s.model), f"checkpoint {n}", s.quant, s.source)]
        if s.drafter and s.drafter.model:
            parts.append((model_path(s.drafter.model), f"drafter {n}", None, s.drafter.source))
        for d, label, quant, source in parts:
            w = out.setdefault(d, _Wanted(label, quant, source))
            w.source = w.source or source
            w.non_root |= s.runtime == "podman" and s.vendor != "rocm"
    return out


def _place(d: Path, w: _Wanted, base: Path, check: bool, progress: Progress | None) -> Step:
    name = f"place {w.label}"
    try:
        src = place_mod.resolve(w.source, base)
    except place_mod.PlaceError as e:
        return Step(name, "ok" if d.is_dir() else "missing",
                    f"{d} is present (its source is not: {e})" if d.is_dir() else str(e))
    if d.exists():
        diff = place_mod.differences(src, d)
        if not diff:
            return Step(name, "ok", f"{d} holds {src}'s files")
        return Step(name, "missing", f"{d} exists but differs from {src} ({', '.join(diff[:3])}); move it away "
                                     "and run setup again to place it, or drop the stack's `source`")
    if check:
        return Step(name, "missing", f"would place {src} at {d}")
    try:
        n, linked, size = place_mod.place(src, d, progress)
    except place_mod.PlaceError as e:
        return Step(name, "missing", str(e))
    return Step(name, "changed", f"placed {src} at {d}: {n} files, {size / 2**30:.2f} GiB "
                                 f"({linked} hard-linked, {n - linked} copied)")


def checkpoints(sf: StackFile, names: list[str], check: bool, progress: Progress | None,
                record: bool = False) -> list[Step]:
    base = (sf.path or Path("stacks.yaml")).expanduser().absolute().parent  # relative sources: beside the file
    steps = []
    for d, w in _wanted(sf, names).items():
        if w.source:
            steps.append(_place(d, w, base, check, progress))
            if steps[-1].status == "missing" and not d.is_dir():
                continue  # nothing to verify yet: the step above says why
        status, detail = verify_checkpoint(d, w.quant, check, record, progress)
        hidden = unreadable_by_others(d) if w.non_root else []
        if status in ("ok", "changed") and hidden:
            status, detail = "missing", (f"{d}: {', '.join(hidden[:3])}{' ...' if len(hidden) > 3 else ''} not readable "
                                         f"by the container's user {CONTAINER_USER}: chmod -R a+rX {d}")
        steps.append(Step(w.label, status, detail))
    return steps


# ---- kernels ------------------------------------------------------------------------------------

def kernels(sf: StackFile, names: list[str], check: bool, say: Callable[[str], None]) -> list[Step]:
    from radiance.launcher.plan import PlanError, resolve_plan

    steps = []
    for n in names:
        s = sf.get(n)
        if s.arch == "cpu":
            steps.append(Step(f"kernels {n}", "skipped", "cpu: the torch reference path has no kernels"))
            continue
        if s.vendor == "nvidia":  # warmed for the checkpoint's shapes on the GPU it serves on
            steps.append(Step(f"kernels {n}", "skipped", f"{s.arch}: radiance-launch compiles the Triton kernels "
                              "on the stack's GPU at its first start (later starts reuse them)"))
            continue
        try:
            plan = resolve_plan(sf, n, "prod", os.environ)
        except (PlanError, ValueError) as e:
            steps.append(Step(f"kernels {n}", "missing", f"cannot plan the launch: {str(e).splitlines()[0]}"))
            continue
        if plan.kernel_dir is not None and (plan.kernel_dir / "manifest.json").is_file():
            steps.append(Step(f"kernels {n}", "ok", f"{plan.kernel_dir} is built"))
        elif check:
            steps.append(Step(f"kernels {n}", "missing", f"would build {s.arch} kernels into {plan.kernel_cache}"))
        else:
            steps.append(_build_kernels(s, plan, say))
    return steps


def _build_kernels(stack, plan, say: Callable[[str], None]) -> Step:
    from radiance.kernels.build import KernelBuildError, build_kernels

    name = f"kernels {stack.name}"
    if stack.runtime == "native":
        try:
            r = build_kernels(plan.arch, plan.kernel_cache, plan.kernel_flags)
        except KernelBuildError as e:
            return Step(name, "missing", str(e).splitlines()[0])
        return Step(name, "changed" if r.built else "ok", f"{r.path}")
    # podman stacks build with the image's compiler (hipcc lives in the image, not on the host).
    say(f"building {plan.arch} kernels in {stack.image}")
    code = ("import sys; from pathlib import Path; from radiance.kernels.build import build_kernels; "
            "print(build_kernels(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]).path)")
    cache = str(plan.kernel_cache)
    try:
        r = podman_mod.run("run", "--rm", "--network=none", "-v", f"{cache}:{cache}:rw", stack.image,
                           "python3", "-c", code, plan.arch, cache, *plan.kernel_flags, timeout=KERNEL_BUILD_TIMEOUT_S)
    except podman_mod.PodmanError as e:
        return Step(name, "missing", str(e))
    if r.returncode != 0:
        return Step(name, "missing", f"kernel build in {stack.image} failed: {(r.stderr or r.stdout).strip()[-300:]}")
    return Step(name, "changed", r.stdout.strip())


# ---- the native units' user ---------------------------------------------------------------------

def service_user(sf: StackFile, names: list[str], check: bool) -> list[Step]:
    """The system layout runs native stacks as `radiance` (deploy/sandbox.py): a system user without a
    login, its home the state directory, created here when missing."""
    import pwd

    from radiance.deploy.layout import SYSTEM_HOME, current
    from radiance.deploy.sandbox import SYSTEM_USER

    if not current().system or not any(sf.get(n).runtime == "native" for n in names):
        return []
    try:
        return [Step("service user", "ok", f"{SYSTEM_USER} (uid {pwd.getpwnam(SYSTEM_USER).pw_uid}) runs the native stacks")]
    except KeyError:
        pass
    argv = ["useradd", "--system", "--user-group", "--home-dir", str(SYSTEM_HOME), "--no-create-home",
            "--shell", "/usr/sbin/nologin", "--comment", "radiance native stacks", SYSTEM_USER]
    if check:
        return [Step("service user", "missing", f"would run `{' '.join(argv)}`")]
    r = hostcmd.run(argv)
    if r.returncode != 0:
        return [Step("service user", "missing", f"`{' '.join(argv)}` failed: {(r.stderr or r.stdout).strip()}; "
                                                f"create the user {SYSTEM_USER} yourself")]
    return [Step("service user", "changed", f"created the system user {SYSTEM_USER} for the native stacks")]


# ---- units --------------------------------------------------------------------------------------

def units(sf: StackFile, unit_dir: Path, check: bool, quadlet_dir: Path | None = None) -> list[Step]:
    from radiance.deploy.render import QUADLET_DIR, render_all

    try:
        results = render_all(sf, unit_dir, check=check, podman_units="auto", quadlet_dir=quadlet_dir or QUADLET_DIR)
    except ValueError as e:  # nothing was written
        return [Step("units", "missing", str(e))]
    changed = [r for r in results if r.changed]
    if not changed:
        return [Step("units", "ok", f"{len(results)} files in {unit_dir} are current")]
    verb = "would write" if check else "wrote"
    step = Step("units", "missing" if check else "changed",
                f"{verb} {', '.join(r.path.name + (' (removed)' if r.removed else '') for r in changed)} in {unit_dir}")
    if check:
        return [step]
    why = systemd.available()
    if why is not None:
        return [step, Step("daemon-reload", "skipped", f"{why}; run `systemctl daemon-reload` where systemd runs")]
    systemd.daemon_reload()
    return [step, Step("daemon-reload", "changed", "systemctl daemon-reload")]
