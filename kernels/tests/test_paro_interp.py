"""The paroquant Triton kernels run under Triton's CPU interpreter against reference.py.

TRITON_INTERPRET must be set before the kernels are decorated, so the checks run in a child
process (this file as a script). Small shapes; every path the GPU takes: decode (split-K with the
ticket reduction), prefill tiles, W4A16 and W4A8, merged P=2/3 partition select, the prologue's
fp32 rotation, the dequant-to-scratch path. The interpreter rounds fp32 -> bf16 by truncation,
so outputs are compared in fp16/fp32 here (bf16 output rounding is gated on the GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_kernels_under_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", RADIANCE_PQ_DECODE_MAX_M="64")
    env.pop("RADIANCE_PQ_I8", None)
    env.pop("RADIANCE_DISABLED_KERNELS", None)
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "checks passed" in proc.stdout


def _main() -> None:
    import torch

    from radiance.kernels import paro_ops as ops
    from radiance.kernels import reference
    from radiance.testing import paro_random as rnd
    from radiance.kernels.triton import paro_rotate as pr
    from radiance.kernels.triton import paro_scratch

    gen = torch.Generator().manual_seed(7)
    failures = []

    def check(name, err, tol):
        print(f"{name}: {err:.2e} (tol {tol:.0e})")
        if not err <= tol:
            failures.append(name)

    t = rnd.random_layer(256, 384, gen)
    x = torch.randn(3, 384, generator=gen)
    tab = pr.build_tables([rnd.rotation_of(t)])
    a, _, _ = pr.rotate(x, tab, pr.ROT32)
    check("prologue fp32", rnd.rel(a[0], reference.rotate(x, t.pairs, t.theta, t.channel_scales)), 1e-5)

    ap, _, rsp = pr.rotate(x, tab, pr.ROT32P)  # the gemv's plane order: a permutation and powers of two, exact
    c = torch.arange(128)
    j = 2 * (c % 4) + c // 64
    want = torch.empty_like(a[0]).view(3, -1, 128)
    want[:, :, j * 16 + (c % 64) // 4] = a[0].view(3, -1, 128) * torch.pow(16.0, -(j % 4).float())
    check("prologue plane order (exact)", float((ap[0] - want.view(3, -1)).abs().max()), 0)
    check("prologue plane order row sums", rnd.rel(rsp[0], a[0].view(3, -1, 128).sum(-1)), 1e-6)

    af, sf, rsf = pr.rotate(x, tab, pr.F16G)  # mma_gl's fragment order: the same values, permuted per group
    ap, sp, rsp = pr.rotate(x, tab, pr.F16GF)
    r = c % 64
    pos = 32 * (r // 16) + 8 * ((r % 16) // 4) + 4 * (r % 2) + 2 * (c // 64) + (r % 4) // 2
    moved = float((ap[0].view(3, -1, 128)[:, :, pos] - af[0].view(3, -1, 128)).abs().max())
    check("prologue fragment order (exact)", moved + float((sp - sf).abs().max() + (rsp - rsf).abs().max()), 0)

    pl, _, _ = pr.rotate(x, tab, pr.PLAIN)  # paro_wgmma's k order: PLAIN, permuted per group
    pw, _, _ = pr.rotate(x, tab, pr.PLAINW)
    t64 = c % 64
    posw = 32 * (t64 // 16) + 16 * (t64 % 2) + 8 * (c // 64) + 2 * ((t64 // 4) % 4) + (t64 % 4) // 2
    assert sorted(posw.tolist()) == list(range(128))
    check("prologue wgmma order (exact)", float((pw[0].view(3, -1, 128)[:, :, posw] - pl[0].view(3, -1, 128)).abs().max()), 0)

    q, s, rs = pr.rotate(x, tab, pr.I8G)
    qr, sr = reference.quant_int8_group(reference.rotate(x, t.pairs, t.theta, t.channel_scales))
    flips = int((q[0].int() - qr.int()).abs().gt(0).sum())
    check("prologue int8 code flips", flips, 2)
    check("prologue int8 scales", rnd.rel(s[0], sr), 1e-6)
    check("prologue int8 scaled row sums", rnd.rel(rs[0], s[0] * q[0].float().view(3, -1, 128).sum(-1)), 0)
    # the tensor-core path's group matrices: bf16 high + low parts against the fp32 matrix, and the
    # fp32 matrix applied in fp32 against the gathers (the bf16 dots themselves are gated on the GPU:
    # this interpreter's bf16 tl.dot is wrong, 2e10 off on a 16x16 product)
    hilo, t32 = pr.group_matrices(tab, "cpu"), pr.group_matrices(tab, "cpu", pr.ROT32)[0, 0]
    check("prologue group matrices hi + lo", rnd.rel(hilo[0, 0].float() + hilo[1, 0].float(), t32), 2e-5)
    mats = reference.group_rotation_matrices(reference.rotation_plan(t.pairs, t.theta))  # no channel scales
    want = t.channel_scales.float().reshape(-1, 128, 1) * mats
    check("prologue group matrices vs reference", rnd.rel(t32.view(128, -1, 128).permute(1, 0, 2), want), 1e-6)
    via = torch.cat([x[:, i:i + 128] @ t32[:, i:i + 128] for i in range(0, 384, 128)], 1)
    check("prologue group matrices applied", rnd.rel(via, a[0]), 1e-6)

    cases = [("P1 K2048 split", [rnd.random_layer(256, 2048, gen, krot=3)]),
             ("P2", [rnd.random_layer(128, 384, gen), rnd.random_layer(256, 384, gen)]),
             ("P3", [rnd.random_layer(256, 256, gen, krot=2), rnd.random_layer(128, 256, gen),
                     rnd.random_layer(128, 256, gen, krot=5)])]
    for i8 in (False, True):
        os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
        act = "int8_group" if i8 else None
        for name, parts in cases:
            layer = ops.prepare(*rnd.merged(parts))
            for m in (1, 3) if layer.k > 1024 else (1, 3, 70):  # prefill tiles on the small-K cases
                x = torch.randn(m, layer.k, generator=gen).to(torch.float16)
                ref = rnd.reference_merged(x, parts, act)
                # the plan's Triton tile (the scratch path's rows: the fused deq GEMM's)
                base = ops.tile_for(layer, m, "deq" if ops.kind_for(layer, m) == "scratch" else None)
                kinds = ("fold", "deq") + (() if i8 else ("gemv", "deqt"))
                tiles = [base] + [ops.Tile(16 if k != "gemv" else 1, 64 if k != "gemv" else 32, 4, 2,
                                           base.split, k) for k in kinds] if m == 3 else [base]
                for t in tiles:
                    check(f"{'W4A8' if i8 else 'W4A16'} {name} M={m} {t}",
                          rnd.rel(ops.forward(layer, x, tile=t), ref), 2e-3)
    for i8 in (False, True):  # bias rides the epilogue, split-K or not, before the one rounding
        os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
        for name, parts in (cases[0], cases[2]):
            layer = ops.prepare(*rnd.merged(parts))
            bias = torch.randn(layer.n, generator=gen).to(torch.float16)
            for m in (1, 3) if layer.k > 1024 else (1, 3, 70):
                x = torch.randn(m, layer.k, generator=gen).to(torch.float16)
                ref = rnd.reference_merged(x, parts, "int8_group" if i8 else None) + bias.float()
                check(f"bias {'W4A8' if i8 else 'W4A16'} {name} M={m} {ops.kind_for(layer, m)}",
                      rnd.rel(ops.forward(layer, x, bias=bias), ref), 2e-3)
    os.environ["RADIANCE_PQ_I8"] = "0"  # W4A16 prefill: the scratch path
    layer = ops.prepare(*rnd.merged(cases[1][1]), cap=(7, 5))
    x = torch.randn(70, layer.k, generator=gen).to(torch.float16)
    check("scratch+mm P2 M=70", rnd.rel(ops.forward(layer, x), rnd.reference_merged(x, cases[1][1], None)), 2e-3)
    for m in (5, 12):  # sm_75: the GEMV up to TURING_GEMV_MAX_M rows, the scratch path above
        xm = torch.randn(m, layer.k, generator=gen).to(torch.float16)
        check(f"sm_75 P2 M={m}", rnd.rel(ops.forward(layer, xm), rnd.reference_merged(xm, cases[1][1], None)), 2e-3)
    bias = torch.randn(layer.n, generator=gen).to(torch.float16)
    check("scratch+mm P2 M=70 bias", rnd.rel(ops.forward(layer, x, bias=bias),
                                            rnd.reference_merged(x, cases[1][1], None) + bias.float()), 2e-3)
    os.environ["RADIANCE_PQ_SCRATCH_ROWS"] = "128"  # the weight in pieces of 128 rows, two buffers
    pieced = ops.prepare(*rnd.merged(cases[1][1]), cap=(7, 5))
    bounds = [b for b in pieced.bounds if b < pieced.n]
    assert pieced.scratch_rows == 128 and len(paro_scratch.pieces([0] + bounds + [pieced.n], 128)) == 3
    check("scratch pieces P2 M=70 bias", rnd.rel(ops.forward(pieced, x, bias=bias),
                                                rnd.reference_merged(x, cases[1][1], None) + bias.float()), 2e-3)
    os.environ["RADIANCE_PQ_SCRATCH_ROWS"] = "0"
    if failures:
        print("FAILED:", failures)
        sys.exit(1)
    print("checks passed")


if __name__ == "__main__":
    _main()


def test_wgmma_operand_order_matches_plainw():
    """paro_wgmma's A operand, assembled as the kernel does (join = stack on a new last axis, then
    its reshape and permute), holds at logical k the weight of the channel that PLAINW puts there:
    the dot over logical k equals the natural one (integer data: exact)."""
    import torch

    from radiance.kernels.triton.paro_gemm import repack
    from radiance.kernels.formats.paroquant import pack_awq

    gen = torch.Generator().manual_seed(7)
    n, k = 16, 256
    codes = torch.randint(0, 16, (k, n), generator=gen, dtype=torch.uint8)
    zeros = torch.full((k // 128, n), 8, dtype=torch.uint8)
    wb, _, _ = repack([pack_awq(codes)], [pack_awq(zeros)], [torch.ones(k // 128, n, dtype=torch.float16)])
    words = wb.view(torch.int32)  # [G, N, 16]

    def deq(w, s):  # the asm: nibbles at bits s and s + 16 -> (e = 0, e = 1)
        return torch.stack([(w >> s) & 15, (w >> (16 + s)) & 15], -1)

    x = torch.randint(-50, 50, (3, k), generator=gen)
    c = torch.arange(128)
    t = c % 64
    pos = 32 * (t // 16) + 16 * (t % 2) + 8 * (c // 64) + 2 * ((t // 4) % 4) + (t % 4) // 2
    xw = torch.empty_like(x).view(3, -1, 128)
    xw[:, :, pos] = x.view(3, -1, 128)  # PLAINW: channel c at position pos[c]
    got = torch.zeros(3, n, dtype=torch.int64)
    for g in range(k // 128):
        for h in range(2):  # the two k halves, words 8h .. 8h + 7 each
            w = words[g, :, 8 * h:8 * h + 8].to(torch.int64) & 0xFFFFFFFF
            j = torch.stack([torch.stack([deq(w, 0), deq(w, 4)], -1), torch.stack([deq(w, 8), deq(w, 12)], -1)], -1)
            a = j.reshape(n, 2, 4, 2, 2, 2).permute(0, 1, 5, 4, 2, 3).reshape(n, 64)
            got += xw[:, g, 64 * h:64 * h + 64] @ a.t()
    want = x @ codes.to(torch.int64)
    assert torch.equal(got, want)
