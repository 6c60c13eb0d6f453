"""The MXFP4 GEMM's code -> e4m3 staging (pq_e2m1.h) built for the host: every e2m1 code at every
fold offset d in [-5, 6] is the exact e4m3 encoding of E2M1 * 2^d, and the Python side's constants
(mxfp4_layout, mxfp4_emulate's table) are the header's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import torch

from radiance.kernels import reference
from radiance.kernels.hip import mxfp4_emulate, mxfp4_layout
from radiance.testing.tools import require

HERE = Path(__file__).resolve().parent


def _table(tmp_path: Path) -> tuple[list[tuple[int, int, int]], int]:
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++-19")
    require(cxx is not None, "needs a host C++ compiler (g++)")
    exe = tmp_path / "e2m1_table"
    subprocess.run([cxx, "-O2", "-std=c++17", str(HERE / "e2m1_table.cpp"), "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    rows = [tuple(int(v) for v in line.split()) for line in lines[:-1]]
    return rows, int(lines[-1].split()[1])  # type: ignore[misc]


def test_every_code_at_every_offset_is_exact(tmp_path):
    rows, unit = _table(tmp_path)
    lo, hi = mxfp4_layout.FOLD_DMIN, mxfp4_layout.FOLD_TOP
    assert {d for d, _, _ in rows} == set(range(lo, hi + 1)) and len(rows) == 16 * (hi - lo + 1)
    d, code, byte = (torch.tensor(c) for c in zip(*rows))
    got = byte.to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    want = reference.e2m1_values(torch.float64)[code] * torch.exp2(d.to(torch.float64))
    assert torch.equal(got, want)
    # the encoding itself, not just the value (code 8, e2m1's -0, is e4m3's -0 byte)
    assert torch.equal(byte.to(torch.uint8), want.to(torch.float8_e4m3fn).view(torch.uint8))
    assert unit == mxfp4_layout.O8_UNIT


def test_emulation_table_is_the_headers(tmp_path):
    rows, _ = _table(tmp_path)
    for d, code, byte in rows:
        if d == mxfp4_layout.FOLD_DMIN and code < 8:
            assert int(mxfp4_emulate.TABLE[code]) == byte
