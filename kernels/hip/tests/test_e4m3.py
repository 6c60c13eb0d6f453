"""The kernels' e4m3 encoder (pq_e4m3.h) built for the host: all 2^32 float bit patterns against an
independent OCP-spec encoder, and a sample against torch's float8_e4m3fn / kernels/reference.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from radiance.kernels import reference
from radiance.testing.tools import require

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++-19")
    require(cxx is not None, "needs a host C++ compiler (g++)")
    exe = tmp_path_factory.mktemp("e4m3") / "e4m3_exhaustive"
    subprocess.run([cxx, "-O2", "-std=c++17", "-pthread", str(HERE / "e4m3_exhaustive.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return exe


def test_all_float_bit_patterns_byte_identical(encoder):
    proc = subprocess.run([str(encoder), "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 mismatches" in proc.stdout


def _encode(encoder: Path, x: torch.Tensor, tmp_path: Path) -> torch.Tensor:
    src, dst = tmp_path / "x.f32", tmp_path / "q.u8"
    src.write_bytes(x.numpy().astype(np.float32).tobytes())
    subprocess.run([str(encoder), "--encode", str(src), str(dst)], check=True)
    return torch.from_numpy(np.frombuffer(dst.read_bytes(), dtype=np.uint8).copy())


def test_sample_matches_torch_saturating_conversion(encoder, tmp_path):
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64).to(torch.int32)
    wide = bits.view(torch.float32)
    near = torch.randn(1 << 18, generator=g) * torch.logspace(-12, 10, 1 << 18, base=2.0)
    x = torch.cat([wide, near, torch.tensor([0.0, -0.0, 448.0, -448.0, 464.0, 480.0, 1e30, -float("inf"),
                                             float("inf"), 2.0**-10, -(2.0**-10), 1.5 * 2.0**-10])])
    got = _encode(encoder, x, tmp_path)
    want = x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).clone()
    want[torch.isnan(x)] = 0  # the kernels' contract: NaN -> 0 (torch keeps NaN)
    want[want == 0x80] = 0  # and -0 -> +0
    assert torch.equal(got, want)


def test_sample_matches_reference_quantizer(encoder, tmp_path):
    """kernels/reference.py's per-token fp8 quantizer with the scale pinned to 1 (row amax 448)."""
    g = torch.Generator().manual_seed(1)
    rows = (torch.randn(64, 1023, generator=g) * torch.logspace(-14, 8, 1023, base=2.0)).clamp(-447, 447)
    rows = torch.cat([rows, torch.full((64, 1), 448.0)], dim=1)
    q, scale = reference.quant_fp8_e4m3_token(rows)
    assert torch.all(scale == 1.0)
    want = q.view(torch.uint8).reshape(-1).clone()
    want[want == 0x80] = 0
    assert torch.equal(_encode(encoder, rows.reshape(-1), tmp_path), want)
