"""Every CPU path of every method on every branch of vLLM's CPU GEMM dispatch a user's CPU can land on,
against the exact reference (radiance/testing/cpu_branches.py states the tolerance: 1e-2 relative in
bf16, 2e-5 in fp32).

The branches: oneDNN (AVX-512 CPUs), torch's F.linear fallback (oneDNN has no bf16 matmul without
AVX-512: most desktops), vLLM's small-GEMM kernel (AMX CPUs, small weights) and zentorch (AMD Zen
with zentorch installed). In-process tests force the branch with vLLM's own predicates (the fallback:
`create_onednn_mm` raises, as it does on an AVX2 CPU; small-GEMM: `check_cpu_sgl_kernel` says yes)
and run vLLM's real kernels; zentorch and an emulated AVX2 host need a process of their own, since
vLLM picks its platform and its kernel library at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from radiance.testing.cpu_branches import METHODS, run_case
from radiance.testing.tools import require

pytestmark = pytest.mark.integration  # real vLLM kernels

AVX2_HOST = Path(__file__).resolve().parents[2] / "radiance" / "testing" / "avx2_host"
DTYPES = (torch.bfloat16, torch.float32)


def _onednn_builds(dtype: torch.dtype) -> bool:
    import vllm._custom_ops as ops

    try:
        ops.create_onednn_mm(torch.randn(64, 128, dtype=dtype).t(), 32)
    except RuntimeError:
        return False
    return True


def force(branch: str, monkeypatch) -> None:
    """Make vLLM's dispatch in this process take `branch` (its own predicates, its real kernels)."""
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.utils as vutils

    if branch == "torch":
        def no_onednn(*a, **kw):
            raise RuntimeError("could not create a primitive descriptor for the matmul primitive (forced)")

        monkeypatch.setattr(ops, "create_onednn_mm", no_onednn)
    elif branch == "small-gemm":
        monkeypatch.setattr(vutils, "check_cpu_sgl_kernel", lambda n, k, dtype: True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("branch", ["onednn", "torch", "small-gemm"])
@pytest.mark.parametrize("cpu_weights", ["folded", "int4"])
def test_every_method_on_every_branch(branch, method, dtype, cpu_weights, vllm_dist, monkeypatch):
    if branch == "onednn" and not _onednn_builds(dtype):
        pytest.skip(f"oneDNN has no {dtype} matmul on this CPU (the forced `torch` case covers it)")
    if branch == "small-gemm" and dtype == torch.float32:
        pytest.skip("vLLM's small-GEMM kernel takes 16-bit weights only")
    if branch == "small-gemm" and not hasattr(torch.ops._C, "convert_weight_packed"):
        pytest.skip("this CPU's vLLM kernel library has no small-GEMM kernel (vLLM never picks it here)")
    from radiance.plugin.cpu_host import int4_gemm_available

    if cpu_weights == "int4" and method == "paroquant" and not int4_gemm_available():
        pytest.skip("vLLM has no CPU int4 GEMM for this CPU (test_int4_without_vllms_int4_kernel_fails_at_load_... "
                    "covers the refusal)")
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", cpu_weights)
    force(branch, monkeypatch)
    if cpu_weights == "int4" and method == "paroquant" and dtype == torch.float32:
        with pytest.raises(RuntimeError, match="int4 GEMM .* cannot run float32 .*RADIANCE_CPU_WEIGHTS=folded"):
            run_case(method, dtype)  # vLLM's CPU int4 GEMM takes 16-bit activations: refused at load
        return
    r = run_case(method, dtype)
    if cpu_weights == "int4" and method == "paroquant":
        assert r["branch"].startswith("CPUWNA16"), r  # vLLM's int4 GEMM: no unquantized dispatch involved
    else:
        assert r["branch"] == branch, r
    assert r["max_rel"] < r["tolerance"], r


def _run_cases(env_extra: dict[str, str], cpu_weights: str = "folded") -> list[dict]:
    env = {**os.environ, **env_extra, "RADIANCE_CPU_WEIGHTS": cpu_weights}
    p = subprocess.run([sys.executable, "-m", "radiance.testing.cpu_branches"], env=env, capture_output=True,
                       text=True, timeout=600)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0, p.stderr[-4000:]
    return lines


def test_on_an_emulated_avx2_host(tmp_path):
    """A whole process as on an AVX2-only CPU (vLLM's AVX2 kernels, oneDNN capped at AVX2): bf16
    takes torch's fallback, fp32 oneDNN, and every method matches the reference on both."""
    cases = _run_cases({"PYTHONPATH": f"{AVX2_HOST}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert len(cases) == 2 * len(METHODS)
    for r in cases:
        assert r["branch"] == ("torch" if r["dtype"] == "bfloat16" else "onednn"), r
        assert r["max_rel"] < r["tolerance"], r


def test_int4_without_vllms_int4_kernel_fails_at_load_naming_the_fix():
    """vLLM's AVX2 kernel library has no CPU int4 GEMM: RADIANCE_CPU_WEIGHTS=int4 must fail when the
    layer is prepared, saying what to use, not at the first request."""
    env = {**os.environ, "PYTHONPATH": f"{AVX2_HOST}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "RADIANCE_CPU_WEIGHTS": "int4"}
    code = ("from radiance.plugin.vllm_int4 import single_rank; single_rank()\n"
            "from radiance.testing.cpu_branches import run_case; import torch\n"
            "run_case('paroquant', torch.bfloat16)")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    assert "RADIANCE_CPU_WEIGHTS=int4" in p.stderr and "RADIANCE_CPU_WEIGHTS=folded" in p.stderr, p.stderr[-3000:]


def _zentorch_dir() -> Path:
    """zentorch for this torch (its release follows torch's major.minor), installed once beside the
    other test downloads; pip's index is reachable where the tests run (CI installs from it)."""
    from filelock import FileLock

    from radiance import paths

    major_minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    target = paths.home() / "testing" / f"zentorch-{major_minor}"
    with FileLock(str(target) + ".lock"):
        if not (target / "zentorch").is_dir():
            p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                                f"zentorch=={major_minor}.*", "deprecated", "wrapt"],
                               capture_output=True, text=True, timeout=900)
            require(p.returncode == 0, f"cannot install zentorch=={major_minor}.* from the package index: "
                                       f"{p.stderr.strip()[-300:]}")
    return target


def test_zentorch_where_vllm_picks_it():
    """On an AMD Zen CPU with zentorch installed vLLM serves unquantized GEMMs through zentorch: the
    folded paths must too (this machine is a Zen; elsewhere vLLM does not take the branch)."""
    from vllm.platforms import _is_amd_zen_cpu

    if not _is_amd_zen_cpu():
        pytest.skip("vLLM takes its zentorch branch on AMD Zen CPUs only")
    zt = _zentorch_dir()
    cases = _run_cases({"PYTHONPATH": f"{zt}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert len(cases) == 2 * len(METHODS)
    for r in cases:
        assert r["branch"] == "zentorch", r
        assert r["max_rel"] < r["tolerance"], r
