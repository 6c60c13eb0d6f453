"""The paroquant_mxfp4 (MXFP4-PARO) Triton kernels (kernels/mxfp4_ops.py, triton/mxfp4_gemm.py)
against kernels.reference (issue #38).

Tolerance, every check: <= 2e-3 relative (Frobenius norm of the error over the reference's), the
issue's bound, against the fp32 reference of the same inputs (W4A16: reference.paroquant_mxfp4_linear;
W4A8: the same with the rotated activations fake-quantized by reference.quant_fp8_e4m3_group, as the
kernel sees them). The window checks are tighter in kind: per output row, so a flushed block of a
small row cannot hide under a large one.

Two tiers:
- the CPU interpreter (TRITON_INTERPRET=1, set before the kernels are decorated, so the checks run
  in a child process: this file as a script), small shapes, well under a minute: every kind, the
  split-K ticket reduction, P = 1/2/3, N off the tile, M = 1, 3, 16, 65, 300, fp16 and fp32 in/out
  (the interpreter rounds fp32 -> bf16 by truncation: bf16 is gated on the GPU), bias, the fold and
  the per-block e8m0 scaling and their windows, W4A8 with its fp8 quantizer;
- `gpu`: the 27B shapes (test_paro_gpu.SHAPES), bf16 and fp16, every kind forced, the sm_86 / sm_75
  tables forced on this GPU, a CUDA graph, W4A8 on sm_89+.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from radiance.kernels.linear import Rotation

TOL = 2e-3  # the bound: relative to the fp32 reference
MS = (1, 3, 16, 65, 300)


def test_kernels_under_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", RADIANCE_PQ_DECODE_MAX_M="64")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "checks passed" in proc.stdout


def _row_rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    """The worst row's relative error (a block flushed in one row shows, whatever the other rows hold)."""
    y, ref = y.double(), ref.double()
    return float(((y - ref).norm(dim=1) / ref.norm(dim=1)).max())


def _span_layer(n: int, k: int, span: int, gen: torch.Generator):
    """Identity-rotated columns whose blocks sit `span` binades apart: block 0 at e8m0 150, the
    others at 150 - span; x is zero on block 0, so each output is the small blocks' alone."""
    from radiance.testing import mxfp4_random as mr

    codes = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.uint8)
    scale = torch.full((n, k // 32), 150 - span, dtype=torch.int32)
    scale[:, 0] = 150
    return mr.identity_layer(codes, scale)


def _main() -> None:
    from radiance.kernels import mxfp4_ops as ops
    from radiance.kernels import reference
    from radiance.kernels.nvidia import pool
    from radiance.kernels.triton import mxfp4_gemm, paro_rotate
    from radiance.testing import mxfp4_random as mr
    from radiance.testing.paro_random import rel

    gen = torch.Generator().manual_seed(38)
    failures = []

    def check(name, err, tol=TOL):
        print(f"{name}: {err:.2e} (tol {tol:.0e})")
        if not err <= tol:
            failures.append(name)

    # (name, partitions, M covered): the interpreter's cost grows with programs x chunks and with the
    # prologue's Givens layers, so the split-K case takes the decode rows, the small-K cases the
    # prefill ones, on few layers (the prologue is paroquant's, gated by test_paro_interp)
    cases = [("P1 K1024 N200", [mr.random_layer(200, 1024, gen, krot=3)], (1, 3, 16, 65)),  # split-K at every M
             ("P2 K256 N128+200", [mr.random_layer(128, 256, gen, krot=1), mr.random_layer(200, 256, gen, krot=2)], MS),
             ("P3 K256 N256+128+72", [mr.random_layer(256, 256, gen, krot=2), mr.random_layer(128, 256, gen, krot=1),
                                      mr.random_layer(72, 256, gen, krot=3)], (1, 65))]
    for name, parts, ms in cases:
        layer = ops.prepare(*mr.merged(parts))
        assert not layer.per_block and layer.parts == len(parts)
        pool.reserve("cpu", 3 * 65 * layer.n)  # the forced split-K tiles' partials
        for m in ms:
            dtype = torch.float16 if m != 16 else torch.float32
            x = torch.randn(m, layer.k, generator=gen).to(dtype)
            ref = mr.reference_merged(x, parts)
            base = ops.tile_for(layer, m)
            tiles = [base]
            if m == 3 and len(parts) == 2:  # the other kind and tile shapes, forced, split-K or not
                tiles += [ops.Tile(16, 64, 4, 2, 3, "deqt"), ops.Tile(64, 32, 4, 2, 2, "deqt"),
                          ops.Tile(32, 64, 4, 2, 1, "deq"), ops.Tile(16, 128, 4, 2, 2, "deq")]
            if m == 65 and len(parts) == 2:  # row blocks past a partial one
                tiles += [ops.Tile(64, 32, 4, 2, 2, "deqt"), ops.Tile(32, 64, 4, 2, 1, "deq")]
            for t in tiles:
                y = ops.forward(layer, x, tile=t)
                assert y.dtype == dtype and y.shape == (m, layer.n)
                check(f"W4A16 {name} M={m} {dtype} {t}", rel(y, ref))
        bias = torch.randn(layer.n, generator=gen).to(torch.float16)
        m = 1 if len(parts) == 1 else 65  # bias in the epilogue, split-K or not, before the one rounding
        x = torch.randn(m, layer.k, generator=gen).to(torch.float16)
        check(f"bias {name} M={m} {ops.tile_for(layer, m)}",
              rel(ops.forward(layer, x, bias=bias), mr.reference_merged(x, parts) + bias.float()))
    assert ops.forward(layer, torch.zeros(0, layer.k, dtype=torch.float16)).shape == (0, layer.n)

    # per-block scaling forced on an ordinary layer: the same numbers
    parts = cases[1][1]
    blk = ops.prepare(*mr.merged(parts), per_block=True)
    for m in (1, 65):
        x = torch.randn(m, blk.k, generator=gen).to(torch.float16)
        check(f"per-block P2 M={m}", rel(ops.forward(blk, x), mr.reference_merged(x, parts)))

    # the e8m0 windows, row by row: 24 binades fold exactly (subnormal fp16 operands), 40 need the
    # per-block scaling (chosen by prepare), as does W4A8's beyond 14
    for span, per_block in ((24, False), (40, True)):
        t = _span_layer(72, 256, span, gen)
        layer = ops.prepare(t.weight, t.weight_scale, [Rotation.of(t)])
        assert layer.per_block == per_block, (span, layer.per_block)
        for m in (1, 65):
            x = torch.randn(m, 256, generator=gen)  # fp32 in and out: the small blocks' outputs are small
            x[:, :32] = 0
            check(f"window {span} binades per_block={per_block} M={m}",
                  _row_rel(ops.forward(layer, x), mr.reference_merged(x, [t])))

    # W4A8: the fp8 quantizer bit for bit against the reference's on the same fp32 input, then the GEMM
    t = cases[2][1][0]
    xr = reference.rotate(torch.randn(5, 256, generator=gen) * 3, t.pairs, t.theta, t.channel_scales)
    xr[1, :128] = 0  # an all-zero group: scale 0, codes 0
    xr[2, 5] = 1e-4  # subnormal e4m3 codes
    q, s = mxfp4_gemm.quant_fp8(xr[None].contiguous())
    qr, sr = reference.quant_fp8_e4m3_group(xr)
    check("fp8 quantizer codes (exact)", float((q[0].float() - qr.float()).abs().max()), 0)
    check("fp8 quantizer scales (exact)", float((s[0] - sr).abs().max()), 0)
    for name, parts, _ in (cases[0], cases[2]):
        layer = ops.prepare(*mr.merged(parts), fp8=True)
        for m in (1,) if len(parts) == 1 else (1, 65):
            x = torch.randn(m, layer.k, generator=gen).to(torch.float16)
            ref = mr.reference_merged(x, parts, "fp8_group")
            for tt in [ops.tile_for(layer, m)] + ([ops.Tile(32, 64, 4, 2, 1, "deq")] if m == 1 else []):
                check(f"W4A8 {name} M={m} {tt}", rel(ops.forward(layer, x, tile=tt), ref))
    for span, per_block in ((14, False), (15, True)):
        t = _span_layer(72, 256, span, gen)
        layer = ops.prepare(t.weight, t.weight_scale, [Rotation.of(t)], fp8=True)
        assert layer.per_block == per_block, (span, layer.per_block)
        x = torch.randn(3, 256, generator=gen)
        x[:, :32] = 0
        check(f"W4A8 window {span} binades per_block={per_block}",
              _row_rel(ops.forward(layer, x), mr.reference_merged(x, [t], "fp8_group")))

    # the prologue is paroquant's own (paro_rotate, PLAIN): the GEMM reads what it wrote
    layer = ops.prepare(*mr.merged(cases[1][1]))
    a, s = ops.rotate(layer, torch.randn(2, 256, generator=gen).half())
    assert s is None and a.dtype == torch.float16 and a.shape == (2, 2, 256) and paro_rotate.PLAIN == 3
    if failures:
        print("FAILED:", failures)
        sys.exit(1)
    print("checks passed")


if __name__ == "__main__":
    _main()


# ----------------------------------------------------------------------------- prepare's checks (no launch)
def _tensors(sizes, k, seed=0):
    from radiance.testing import mxfp4_random as mr

    gen = torch.Generator().manual_seed(seed)
    return [mr.random_layer(n, k, gen, krot=2) for n in sizes]


def test_fp8_knob_selects_w4a8(monkeypatch):
    """RADIANCE_MXFP4_FP8 picks W4A8 at prepare; below sm_89 it is refused, naming the knob."""
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr

    w, sc, rots, runs = mr.merged(_tensors([128], 256))
    assert not ops.prepare(w, sc, rots, runs, cap=(9, 0)).fp8
    monkeypatch.setenv("RADIANCE_MXFP4_FP8", "1")
    assert ops.prepare(w, sc, rots, runs, cap=(9, 0)).fp8
    assert not ops.prepare(w, sc, rots, runs, cap=(9, 0), fp8=False).fp8  # an explicit choice wins
    with pytest.raises(ValueError, match="RADIANCE_MXFP4_FP8=1 needs fp8 tensor-core dots.*sm_86"):
        ops.prepare(w, sc, rots, runs, cap=(8, 6))
    monkeypatch.setenv("RADIANCE_MXFP4_FP8", "yes")
    with pytest.raises(ValueError, match="RADIANCE_MXFP4_FP8='yes': use 0 or 1"):
        ops.prepare(w, sc, rots, runs, cap=(9, 0))


def test_prepare_refuses_bad_partitions():
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr

    w, sc, rots, runs = mr.merged(_tensors([200, 100], 256))
    with pytest.raises(ValueError, match="multiple of 128"):
        ops.prepare(w, sc, rots, runs)
    with pytest.raises(ValueError, match="one run each"):
        ops.prepare(w, sc, rots)
    w4, sc4, rots4, runs4 = mr.merged(_tensors([128] * 4, 256))
    with pytest.raises(ValueError, match="1..3 rotations"):
        ops.prepare(w4, sc4, rots4, runs4)
    with pytest.raises(ValueError, match="sm_89"):
        ops.prepare(w, sc, rots[:1], cap=(8, 6), fp8=True)


def test_repack_layout_and_window():
    """WB byte t of (chunk c, column n): code k = 64c + t low, 64c + 32 + t high; EX the fold's
    multiplier field (2^(e - r + 14) in fp16) with r = largest live exponent - 1; all-zero blocks 0."""
    from radiance.kernels.formats.paroquant_mxfp4 import pack_e2m1
    from radiance.kernels.triton import mxfp4_gemm

    codes = torch.randint(0, 16, (3, 256), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    codes[2, 64:96] = 8  # a block of negative zeros: not live
    scale = torch.tensor([[120, 121, 122, 123, 124, 125, 126, 127]] * 3, dtype=torch.uint8)
    scale[2, 2] = 200
    wb, ex, rsc, per_block = mxfp4_gemm.repack(pack_e2m1(codes), scale)
    assert not per_block and wb.shape == (4, 3, 32) and ex.shape == (8, 3)
    assert torch.equal(wb[1, 0] & 15, codes[0, 64:96]) and torch.equal(wb[1, 0] >> 4, codes[0, 96:128])
    assert ex[:, 0].tolist() == [e - 126 + 29 for e in range(120, 128)] and rsc[0] == 2.0 ** (126 - 127)
    assert ex[2, 2] == 0 and ex[7, 2] == 29 + 1  # the dead block: 0; the column's top block: 2^15
    _, _, _, forced = mxfp4_gemm.repack(pack_e2m1(codes), scale, per_block=True)
    assert forced
    scale[0, 0] = 90  # 36 binades below its column's top: outside the W4A16 fold's window
    assert mxfp4_gemm.repack(pack_e2m1(codes), scale)[3]
    with pytest.raises(ValueError, match="per-block"):
        mxfp4_gemm.repack(pack_e2m1(codes), scale, per_block=False)


# ----------------------------------------------------------------------------- GPU (the device)
SHAPES = {  # name: partition sizes along N (merged linears have several), K -- test_paro_gpu.SHAPES
    "gate_up": ([34816], 5120), "down": ([5120], 17408), "qkv": ([14336], 5120), "out": ([5120], 6144),
    "qkv_P3": ([12288, 1024, 1024], 5120), "gate_up_P2": ([17408, 17408], 5120),
    "odd_n": ([1000], 1280),  # N a multiple of no tile, 10 groups
}
GPU_MS = (1, 2, 3, 13, 16, 33, 64, 65, 300, 511, 2048)


@pytest.fixture(scope="module")
def gen():
    return torch.Generator(device="cuda").manual_seed(38)


def _layers(sizes, k, gen):
    from radiance.testing import mxfp4_random as mr

    return [mr.random_layer(n, k, gen) for n in sizes]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gpu_every_shape_and_m(shape, dtype, gen):
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr
    from radiance.testing.paro_random import rel

    sizes, k = SHAPES[shape]
    parts = _layers(sizes, k, gen)
    layer = ops.prepare(*mr.merged(parts))
    assert not layer.per_block
    worst = []
    for m in GPU_MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        y = ops.forward(layer, x)
        assert y.dtype == dtype and y.shape == (m, sum(sizes))
        worst.append((rel(y, mr.reference_merged(x, parts)), m))
    err, m = max(worst)
    assert err <= TOL, f"{shape} {dtype}: worst rel {err:.2e} at M={m}: {worst}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["down", "qkv_P3", "odd_n"])
def test_gpu_every_kind_and_tile(shape, gen):
    """Each kind and tile shape, forced, split-K or not, the per-block scaling, a bias."""
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr
    from radiance.testing.paro_random import rel

    sizes, k = SHAPES[shape]
    parts = _layers(sizes, k, gen)
    w, sc, rots, runs = mr.merged(parts)
    bias = torch.randn(sum(sizes), device="cuda", dtype=torch.bfloat16)
    for per_block in (False, True):
        layer = ops.prepare(w, sc, rots, runs, per_block=per_block)
        for m in MS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = mr.reference_merged(x, parts)
            split = ops.tile_for(layer, m).split
            tiles = [ops.Tile(bm, bn, w_, st, sp, "deqt") for bm, bn, w_, st, sp in
                     ((16, 64, 4, 3, split), (16, 128, 4, 3, split), (32, 64, 4, 3, split), (64, 64, 4, 3, split),
                      (64, 128, 8, 2, 1), (16, 32, 2, 4, split))]
            tiles += [ops.Tile(bm, bn, w_, st, 1, "deq") for bm, bn, w_, st in
                      ((128, 128, 8, 3), (64, 128, 4, 3), (128, 64, 4, 3), (64, 64, 4, 2), (32, 64, 4, 4))]
            for t in tiles:
                err = rel(ops.forward(layer, x, tile=t), ref)
                assert err <= TOL, f"{shape} per_block={per_block} M={m} {t}: rel {err:.2e}"
            err = rel(ops.forward(layer, x, bias=bias), ref + bias.float())
            assert err <= TOL, f"{shape} per_block={per_block} M={m} bias: rel {err:.2e}"


@pytest.mark.gpu
def test_gpu_windows_row_by_row(gen):
    # the fold's 24-binade window on the tensor cores (fp16 subnormal operands) and the per-block
    # scaling beyond it, each output row on its own (2e-3)
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr

    cpu = torch.Generator().manual_seed(5)
    for span, per_block in ((10, False), (24, False), (40, True), (100, True)):
        t = _span_layer(1000, 1280, span, cpu)
        t = type(t)(*(getattr(t, f).cuda() for f in ("weight", "weight_scale", "pairs", "theta", "channel_scales")))
        layer = ops.prepare(t.weight, t.weight_scale, [Rotation.of(t)])
        assert layer.per_block == per_block
        for m in (1, 16, 300):
            x = torch.randn(m, 1280, device="cuda")  # fp32 in and out: 2^-77 blocks underflow fp16
            x[:, :32] = 0
            err = _row_rel(ops.forward(layer, x), mr.reference_merged(x, [t]))
            assert err <= TOL, f"span {span} M={m}: worst row rel {err:.2e}"


@pytest.mark.gpu
def test_gpu_decode_under_cuda_graph(gen):
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr

    parts = _layers([5120], 17408, gen)  # split-K: the ticket reduction inside the graph
    layer = ops.prepare(*mr.merged(parts))
    x = torch.randn(1, 17408, device="cuda", dtype=torch.bfloat16)
    eager = ops.forward(layer, x)
    assert ops.tile_for(layer, 1).split > 1
    from radiance.testing.graphs import replayed

    assert torch.equal(replayed(lambda: ops.forward(layer, x)), eager)  # fixed split order: replays are bit-identical


@pytest.mark.gpu
@pytest.mark.parametrize("cap", [(7, 5), (8, 6)], ids=["sm_75", "sm_86"])
def test_gpu_user_card_tables_on_this_gpu(cap, gen):
    """The sm_75 / sm_86 tiles (fitted to 64 / 99 KB; sm_75's small prefill tile) forced here, fp16."""
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr
    from radiance.testing.paro_random import rel

    parts = _layers([1024, 1024], 5120, gen)
    layer = ops.prepare(*mr.merged(parts), cap=cap)
    for m in (1, 3, 16, 65, 300):
        x = torch.randn(m, 5120, device="cuda", dtype=torch.float16)
        err = rel(ops.forward(layer, x), mr.reference_merged(x, parts))
        assert err <= TOL, f"{cap} M={m} {ops.tile_for(layer, m)}: rel {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["gate_up", "down", "qkv_P3", "odd_n"])
def test_gpu_w4a8_fp8(shape, gen):
    """W4A8 (sm_89+): e4m3 activations per (row, 128-group), against the reference with the same
    activation quantization (2e-3)."""
    from radiance.kernels import mxfp4_ops as ops
    from radiance.testing import mxfp4_random as mr
    from radiance.testing.paro_random import rel

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 tensor-core dots need sm_89+")
    sizes, k = SHAPES[shape]
    parts = _layers(sizes, k, gen)
    layer = ops.prepare(*mr.merged(parts), fp8=True)
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref = mr.reference_merged(x, parts, "fp8_group")
        for t in (ops.tile_for(layer, m), ops.Tile(16, 64, 4, 3, 1, "deqt"), ops.Tile(64, 128, 4, 3, 1, "deq")):
            err = rel(ops.forward(layer, x, tile=t), ref)
            assert err <= TOL, f"W4A8 {shape} M={m} {t}: rel {err:.2e}"
