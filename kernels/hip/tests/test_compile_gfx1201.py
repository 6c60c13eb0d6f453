"""The HIP sources compile for gfx1201 with Debian's clang-19 (device only): the GEMM kernels (int4
and MXFP4) hold the fp8 WMMA, the rotation kernels (the fused producers too) none, no kernel spills
to scratch, and a failing build reports the compiler's
message."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from radiance.kernels.hip.build import SRC_DIR, HipBuildError, HipToolchainMissing, compile_hip
from radiance.testing.tools import require_tool

# the rotation prologue and its fused producers (residual add + RMSNorm, silu-mul)
ROTATE = [f"pq_{p}_{t}_{m}" for p in ("rotate_quant", "add_rms_rotate_quant", "silu_mul_rotate_quant")
          for t in ("f16", "bf16") for m in ("group", "token")] + ["pq_rms_rinv_f16", "pq_rms_rinv_bf16"]
GEMM = [f"pq_int4_fp8_gemm_decode_m{mt}_{o}" for mt in (1, 2, 4) for o in ("f16", "bf16", "f32")] + [
    f"pq_int4_fp8_gemm_prefill_{o}" for o in ("f16", "bf16")
]
# MXFP4 (pq_mxfp4_gemm.hip): the fold (default), the per-block fallback, the per-token prefill
GEMM += [f"pq_mxfp4_fp8_gemm_decode_{v}_m{mt}" for v in ("fold", "blk") for mt in (1, 2, 4)]
GEMM += [f"pq_mxfp4_fp8_gemm_prefill_{v}" for v in ("fold", "fold_tok", "blk")]


def _resources(remarks: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in remarks.splitlines():
        m = re.search(r"remark:\s+Function Name: (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = {}
            continue
        m = re.search(r"remark:\s+([A-Za-z ]+?)(?: \[bytes/lane\])?: (\d+)", line)
        if m and name:
            out[name][m.group(1).strip()] = int(m.group(2))
    return out


def _wmma_per_function(obj: Path) -> dict[str, int]:
    dis = subprocess.run(["llvm-objdump-19", "-d", "--mcpu=gfx1201", str(obj)], check=True,
                         capture_output=True, text=True).stdout
    counts: dict[str, int] = {}
    name = None
    for line in dis.splitlines():
        m = re.match(r"^[0-9a-f]+ <(\S+)>:", line)
        if m:
            name = m.group(1)
            counts.setdefault(name, 0)
        elif name and "v_wmma_f32_16x16x16_fp8_fp8" in line:
            counts[name] += 1
    return counts


@pytest.mark.parametrize("wperm", ["1", "0"])
def test_gfx1201_objects_hold_fp8_wmma_and_no_spills(tmp_path, wperm):
    require_tool("clang++-19", "llvm-objdump-19")
    obj = tmp_path / "pq.o"
    remarks = compile_hip(SRC_DIR, "gfx1201", [f"-DPQ_WPERM={wperm}"], obj, device_only=True)
    res = _resources(remarks)
    assert set(ROTATE + GEMM) <= set(res), sorted(res)
    for name, r in res.items():
        assert r.get("ScratchSize") == 0, f"{name} spills: {r}"
        assert r.get("VGPRs", 0) > 0, f"{name}: no resource usage parsed: {r}"
    wmma = _wmma_per_function(obj)
    for name in GEMM:
        assert wmma.get(name, 0) > 0, f"{name} has no v_wmma_f32_16x16x16_fp8_fp8"
    for name in ROTATE:
        assert wmma.get(name, 0) == 0


def test_compile_error_carries_compiler_message_and_leaves_nothing(tmp_path):
    require_tool("clang++-19")
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken.hip").write_text("__attribute__((global)) void k() { undefined_thing(); }\n")
    out = tmp_path / "out" / "pq.o"
    with pytest.raises(HipBuildError, match="undefined_thing"):
        compile_hip(src, "gfx1201", [], out, device_only=True)
    assert not out.exists()


def test_no_amd_toolchain_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no hipcc anywhere on this PATH (nor in /opt/rocm here)
    if Path("/opt/rocm/bin/hipcc").exists():
        pytest.skip("a real ROCm install is present")
    with pytest.raises(HipToolchainMissing, match="hipcc"):
        compile_hip(SRC_DIR, "gfx1201", [], tmp_path / "pq.so")
    assert not (tmp_path / "pq.so").exists()
    with pytest.raises(ValueError, match="arch"):
        compile_hip(SRC_DIR, "rdna4", [], tmp_path / "pq.so")


def test_host_launchers_parse_as_hip_against_a_fake_runtime_header(tmp_path):
    """The extern "C" launchers are excluded from the device-only object; check them (host and
    device passes) against a FAKE declarations-only hip_runtime.h, since no ROCm is installed here."""
    require_tool("clang++-19")
    unity = tmp_path / "all.hip"
    unity.write_text("".join(f'#include "{s}"\n' for s in sorted(SRC_DIR.glob("*.hip"))))
    fake = Path(__file__).resolve().parent / "fake_hip"
    proc = subprocess.run(["clang++-19", "-x", "hip", "--offload-arch=gfx1201", "-nogpulib", "-nogpuinc",
                           "-isystem", str(fake), f"-I{SRC_DIR}", "-std=c++17", "-fsyntax-only", str(unity)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
