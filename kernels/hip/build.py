"""Compile the HIP sources in this folder: hipcc for an AMD arch, clang-19 for the CI compile check,
nvcc for an NVIDIA arch (the same sources with the emulated WMMA, to test numerics on a lent GPU).

`compile_hip` only compiles. Caching, keys and atomic placement belong to the caller
(`radiance.kernels.build`); this function writes `out_path` or raises and leaves nothing there.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from radiance.knobs import knob
from radiance.arch import vendor

SRC_DIR = Path(__file__).resolve().parent
# -DPQ_NO_GPU_INCLUDES: the kernels spell their own attributes (no HIP headers with -nogpuinc)
DEVICE_ONLY_FLAGS = ("--cuda-device-only", "--no-gpu-bundle-output", "-nogpulib", "-nogpuinc", "-DPQ_NO_GPU_INCLUDES")


class HipBuildError(RuntimeError):
    """The compiler failed (message carries its output) or could not be run."""


class HipToolchainMissing(HipBuildError):
    """No compiler for the requested arch on this machine."""


def sources(src_dir: Path = SRC_DIR) -> list[Path]:
    """The translation units, in a fixed order (their hash keys the build cache)."""
    return sorted(Path(src_dir).glob("*.hip"))


def source_files(src_dir: Path = SRC_DIR) -> list[Path]:
    """Everything the build reads: sources and headers."""
    return sorted([*Path(src_dir).glob("*.hip"), *Path(src_dir).glob("*.h")])


def knob_flags() -> list[str]:
    """Compiler flags from the knobs that change the compiled kernels (they key the build):
    RADIANCE_PQ_HIPCC_FLAGS verbatim, and RADIANCE_PQ_WPERM as -DPQ_WPERM."""
    wperm = knob("RADIANCE_PQ_WPERM")
    if wperm not in ("0", "1"):
        raise ValueError(f"RADIANCE_PQ_WPERM={wperm!r}: use 1 (fragment-order weights) or 0 ([N, K/8] words)")
    return [*shlex.split(knob("RADIANCE_PQ_HIPCC_FLAGS") or ""), f"-DPQ_WPERM={wperm}"]


def _tool(names: Sequence[str], what: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise HipToolchainMissing(
        f"{what}: none of {', '.join(names)} found on PATH; no toolchain for this arch here "
        "(the gfx1201 build runs inside the ROCm image, where hipcc lives in /opt/rocm/bin)"
    )


def command(unity: Path, src_dir: Path, arch: str, flags: Sequence[str], out_path: Path, device_only: bool) -> list[str]:
    common = ["-O3", "-std=c++17", f"-I{src_dir}", *flags]
    target = vendor(arch)
    if target == "rocm":
        if device_only:
            clang = _tool([os.environ.get("HIP_CLANG", "clang++-19"), "clang++"], f"compile check for {arch}")
            return [clang, "-x", "hip", f"--offload-arch={arch}", *DEVICE_ONLY_FLAGS, *common,
                    "-Rpass-analysis=kernel-resource-usage", "-c", str(unity), "-o", str(out_path)]
        hipcc = _tool(["hipcc", "/opt/rocm/bin/hipcc"], f"kernel build for {arch}")
        return [hipcc, f"--offload-arch={arch}", "-fPIC", "-shared", *common, str(unity), "-o", str(out_path)]
    if target == "nvidia":
        nvcc = _tool(["nvcc", "/usr/local/cuda/bin/nvcc"], f"kernel build for {arch}")
        return [nvcc, "-x", "cu", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", *common,
                str(unity), "-o", str(out_path)]
    raise ValueError(f"arch {arch!r}: expected an AMD gfx target (e.g. gfx1201) or an NVIDIA sm_XY")


def compile_hip(src_dir: Path | str, arch: str, flags: Sequence[str] | str, out_path: Path | str,
                *, device_only: bool = False) -> str:
    """Compile every *.hip in `src_dir` as one translation unit into `out_path` (a shared library;
    with device_only=True a gfx device object, the CI check). Returns the compiler's stderr
    (resource-usage remarks for the device-only build). Raises HipBuildError with the compiler's
    message on failure, HipToolchainMissing when there is no compiler for `arch`."""
    src_dir, out_path = Path(src_dir).resolve(), Path(out_path)
    flags = shlex.split(flags) if isinstance(flags, str) else list(flags)
    srcs = sources(src_dir)
    if not srcs:
        raise HipBuildError(f"no *.hip sources in {src_dir}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="radiance-hip-") as tmp:
        unity = Path(tmp) / "radiance_pq_all.hip"
        unity.write_text("".join(f'#include "{s}"\n' for s in srcs))
        cmd = command(unity, src_dir, arch, flags, out_path, device_only)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise HipBuildError(f"could not run {cmd[0]}: {e}") from e
    if proc.returncode != 0 or not out_path.exists():
        with contextlib.suppress(FileNotFoundError):
            out_path.unlink()
        msg = (proc.stderr or proc.stdout).strip()
        raise HipBuildError(
            f"{Path(cmd[0]).name} failed for {arch} (exit {proc.returncode}):\n{msg[-6000:]}\n"
            f"command: {shlex.join(cmd)}"
        )
    return proc.stderr
