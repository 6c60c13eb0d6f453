"""The kernel build cache: `build_kernels(arch, cache_dir, flags) -> BuildResult(path, built)`.

One interface for every device. A build is keyed by the hash of the sources it reads, the arch and
the flags; it is compiled into a temporary directory that is renamed into place only on success
(radiance.atomic.directory), under a file lock so two launches never build the same key twice.
A second call with the same key finds the finished entry and builds nothing (`built=False`).

Per-arch builders:
  cpu      nothing to build: the CPU path is the exact torch reference (BuildResult(None, False)).
  gfx*     radiance.kernels.hip.build.compile_hip -> <entry>/radiance_hip.so (hipcc, in the image).
  sm_*     Triton warm-up (kernels/warmup.py): every kernel variant the tables pick for the
           checkpoint's linears (`specs`) at every row count is compiled on the GPU, in a child
           process, into TRITON_CACHE_DIR (from `env`: the stack's compile cache); the manifest
           records how many. The specs are part of the key (the caller hashes them into `flags`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from radiance import atomic
from radiance.kernels.linear_spec import NO_GPU, LinearSpec, specs_json
from radiance.arch import vendor

KERNELS_DIR = Path(__file__).resolve().parent
MANIFEST = "manifest.json"
HIP_LIBRARY = "radiance_hip.so"  # the plugin loads $RADIANCE_KERNEL_DIR/radiance_hip.so on gfx


class KernelBuildError(RuntimeError):
    """A kernel build failed or cannot run here; nothing was added to the cache."""


@dataclass(frozen=True)
class BuildResult:
    path: Path | None  # the cache entry holding the built kernels (None: nothing to build, CPU)
    built: bool  # True: compiled by this call; False: reused from the cache (or nothing to build)
    key: str = ""


def family(arch: str) -> str:
    try:
        return {"cpu": "cpu", "rocm": "hip", "nvidia": "triton"}[vendor(arch)]
    except ValueError as e:
        raise KernelBuildError(str(e)) from None


def default_src_dir(arch: str) -> Path:
    return KERNELS_DIR / {"cpu": ".", "hip": "hip", "triton": "triton"}[family(arch)]


def source_files(arch: str, src_dir: Path | None = None) -> list[Path]:
    src = Path(src_dir) if src_dir is not None else default_src_dir(arch)
    fam = family(arch)
    if fam == "hip":
        from radiance.kernels.hip.build import source_files as hip_sources

        return hip_sources(src)
    if fam == "triton":  # the kernels, the kinds that choose and launch them, their tiles, the ops and methods
        kernels = src.parent
        return (sorted(src.glob("*.py")) + sorted(kernels.glob("*.py")) + sorted((kernels / "nvidia").rglob("*.py"))
                + sorted((kernels / "methods").glob("*.py")) + sorted((kernels / "tiles").glob("*.json")))
    return []


def arch_flags(arch: str) -> tuple[str, ...]:
    """The flags the knobs ask for on this arch (they are part of the key)."""
    if family(arch) == "hip":
        from radiance.kernels.hip.build import knob_flags

        return tuple(knob_flags())
    return ()


def build_key(arch: str, flags: Sequence[str] = (), src_dir: Path | None = None) -> str:
    h = hashlib.sha256(f"{arch}\0{chr(0).join(flags)}\0".encode())
    for f in source_files(arch, src_dir):
        h.update(f"{f.name}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def kernel_dir(arch: str, cache_dir: Path, flags: Sequence[str] = (), src_dir: Path | None = None) -> Path | None:
    """Where the build for (sources, arch, flags) lives; None on the CPU (nothing is built)."""
    if family(arch) == "cpu":
        return None
    return Path(cache_dir) / f"{arch}-{build_key(arch, flags, src_dir)}"


def _build_hip(arch: str, src_dir: Path, flags: Sequence[str], out: Path, **_) -> list[str]:
    from radiance.kernels.hip.build import HipBuildError, HipToolchainMissing, compile_hip

    try:
        compile_hip(src_dir, arch, list(flags), out / HIP_LIBRARY)
    except HipToolchainMissing as e:
        raise KernelBuildError(f"cannot build the {arch} kernels: {e}") from None
    except HipBuildError as e:
        raise KernelBuildError(f"the {arch} kernel build failed: {e}") from None
    return [HIP_LIBRARY]


def _build_triton(arch: str, src_dir: Path, flags: Sequence[str], out: Path, *, specs: Sequence[LinearSpec] = (),
                  env: dict[str, str] | None = None) -> list:
    """Warm the specs' kernels on this machine's GPU in a child process (its CUDA context ends with
    it: the launcher execs vLLM next). Returns [the warm-up report]."""
    if not specs:
        return []
    (out / "specs.json").write_text(specs_json(list(specs)) + "\n")
    report = out / "warm.json"
    # -P and cwd /: a `radiance` folder in the caller's working directory (a checkout) must not shadow the package
    cmd = [sys.executable, "-P", "-m", "radiance.kernels.warmup", "--specs", str(out / "specs.json"), "--report",
           str(report)]
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, cwd="/")
    if proc.returncode == NO_GPU:
        raise KernelBuildError(f"the {arch} kernels are compiled on the GPU the stack serves on, and this process "
                               "sees no CUDA device (CUDA_VISIBLE_DEVICES, the container's GPU access)")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise KernelBuildError(f"the {arch} kernels did not compile with Triton {_triton_version()} "
                               f"(radiance is tested with Triton 3.6 and 3.9):\n{tail}")
    return [json.loads(report.read_text())]


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "(not installed)"


BUILDERS: dict[str, Callable[..., list]] = {
    "hip": _build_hip,
    "triton": _build_triton,
}


def build_kernels(arch: str, cache_dir: Path, flags: Sequence[str] = (), *, src_dir: Path | None = None,
                  specs: Sequence[LinearSpec] = (), env: dict[str, str] | None = None) -> BuildResult:
    """Build (or reuse) the kernels for `arch` under `cache_dir`. Raises KernelBuildError.
    specs / env: the NVIDIA warm-up's linears and environment (ignored elsewhere)."""
    fam = family(arch)
    if fam == "cpu":
        return BuildResult(None, False, "cpu")
    flags = tuple(flags)
    src = Path(src_dir).resolve() if src_dir is not None else default_src_dir(arch)
    key = build_key(arch, flags, src)
    final = Path(cache_dir) / f"{arch}-{key}"
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent / f".{final.name}.lock")):
        if (final / MANIFEST).is_file():
            return BuildResult(final, False, key)
        t0 = time.monotonic()
        try:
            with atomic.directory(final) as tmp:
                outputs = BUILDERS[fam](arch, src, flags, tmp, specs=specs, env=env)
                atomic.write_text(tmp / MANIFEST, json.dumps({
                    "arch": arch, "flags": list(flags), "key": key, "outputs": outputs,
                    "sources": [p.name for p in source_files(arch, src)],
                    "build_s": round(time.monotonic() - t0, 3), "built_at": time.time()}, indent=1))
        except KernelBuildError:
            raise
        except Exception as e:  # a builder's own failure: same contract, nothing cached
            raise KernelBuildError(f"the {arch} kernel build failed: {type(e).__name__}: {e}") from e
    return BuildResult(final, True, key)
