"""The exponent-trick int32 -> fp32 conversion of the int8 GEMMs' group dots (small_int.py):
exact over the whole range it claims, under Triton's CPU interpreter and, marked gpu, on the
device. Both run this file as a script in a child process: TRITON_INTERPRET must be set before
a kernel is decorated, and Triton's JIT reads the kernel's source from a file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _check() -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def conv(V, T, Y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(Y + offs, small_int_f32(tl.load(V + offs, mask=mask), tl.load(T + offs, mask=mask)), mask=mask)

    dev = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    lim = 1 << 22
    # the range's ends, the group dots' extremes (pq2 2*127*128, paroquant W4A8 8*127*128), random values
    edge = torch.tensor([-lim, lim - 1, -32512, 32512, -130048, 130048, 0, 1, -1])
    v = torch.cat([edge, torch.randint(-lim // 2, lim // 2, (5000,))]).to(torch.int32)
    t = torch.cat([torch.zeros(len(edge)), torch.randint(-lim // 2, lim // 2, (5000,))]).to(torch.int32)
    v, t = v.to(dev), t.to(dev)
    y = torch.empty(len(v), dtype=torch.float32, device=dev)
    conv[(triton.cdiv(len(v), 1024),)](v, t, y, len(v), BLOCK=1024)
    assert torch.equal(y, (v - t).to(torch.float32)), (y - (v - t).float()).abs().max()
    print("ok", dev)


def _run(env):
    r = subprocess.run([sys.executable, "-P", __file__], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_exact_under_interpreter():
    pytest.importorskip("triton")
    assert _run({**os.environ, "TRITON_INTERPRET": "1"}) == ["ok", "cpu"]


@pytest.mark.gpu
def test_exact_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    assert _run(env) == ["ok", "cuda"]


if __name__ == "__main__":
    from radiance.kernels.triton.small_int import small_int_f32  # a module global: the kernel resolves it here

    _check()
