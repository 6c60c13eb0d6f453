"""Experiment (branch exp/pq2-group-major): does the pq2 weights' row-major layout cap the small band's
streaming rate? One device call.

1. A pure read probe: BN rows x C words per row per loop step, either row-major [N, K/16] words
   (each step reads BN separate C-word runs, 4*KW bytes apart) or group-major (the same bytes laid
   [K/16/C, N, C]: each step one contiguous BN*C run). GB/s per (layout, C, BN).
2. The `gluon` kernel at its table tile on the prepared row-major weights against the same kernel
   reading a group-major [G, N, 8]-word copy (GMAJOR), and also the scales as [G, N] (SMAJOR),
   M = 2, 4, 8, outputs checked bit-equal.

    python bench/probe_pq2_layout.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from bench_pq2 import SHAPES, copies_for, make_layers
from timing import copy_bandwidth, graph_time

from radiance.kernels import pq2_ops
from radiance.kernels import pq2_table as table


@triton.jit
def _read_probe(W, OUT, N, KW, C: tl.constexpr, BN: tl.constexpr, GMAJOR: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    cols = tl.arange(0, C)
    acc = tl.zeros((BN, C), tl.int32)
    for s in range(0, KW // C):
        if GMAJOR:
            off = (s * N + rows[:, None]) * C + cols[None, :]
        else:
            off = rows[:, None] * KW + s * C + cols[None, :]
        acc ^= tl.load(W + off)
    tl.store(OUT + tl.program_id(0), tl.sum(tl.sum(acc, 1), 0))


def probe(bw):
    n, k = SHAPES["gate_up"]
    kw = k // 16
    ws = [torch.randint(-2**31, 2**31 - 1, (n, kw), dtype=torch.int32, device="cuda") for _ in range(copies_for(n * kw * 4))]
    out = torch.empty(n, dtype=torch.int32, device="cuda")
    print(f"# read probe, gate_up bytes ({n}x{kw} words = {n * kw * 4 / 1e6:.1f} MB), copy roof {bw / 1e9:.0f} GB/s")
    for bn in (64, 128):
        for c in (8, 16, 32, 64):
            for gm in (False, True):
                us = graph_time([lambda w=w: _read_probe[(n // bn,)](w, out, n, kw, C=c, BN=bn, GMAJOR=gm, num_warps=4)
                                 for w in ws])
                print(f"probe BN={bn:4d} C={c:3d} words ({4 * c:4d} B/row/step) {'group' if gm else 'row  '}-major "
                      f"{us:7.1f} us {n * kw * 4 / us / 1e3:7.0f} GB/s", flush=True)


def gluon_layouts():
    from radiance.kernels.triton.pq2_gluon import operand_layouts, pq2_mma_gl

    for name in ("gate_up", "down", "qkv", "out", "lm_head"):
        n, k = SHAPES[name]
        layers = make_layers(n, k, copies_for(n * k // 4))
        gm = [layer.qweight32 for layer, _ in layers]  # as prepared: [G, N, 8] words
        rowm = [layer.qweight32.transpose(0, 1).contiguous() for layer, _ in layers]  # the checkpoint's [N, G, 8]
        st = [layer.scales.t().contiguous() for layer, _ in layers]  # [G, N]
        for m in (2, 4, 8):
            tile = table.tile_for("gluon", n, k, m, torch.cuda.get_device_properties(0).multi_processor_count, True,
                                  "sm_90")
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]

            def run(layer, w32, x, major, ws=None):
                q, a, t = pq2_ops.quantize_activations(x, True, layer)
                groups = k // 128
                gps = -(-groups // tile.splits)
                splits = -(-groups // gps)
                y = torch.empty(m, n, dtype=x.dtype, device="cuda")
                p = y if splits == 1 else torch.empty((splits, m, n), dtype=torch.float32, device="cuda")
                w_l, u_l = operand_layouts(tile.bn, tile.warps, tile.bt)
                pq2_mma_gl[(triton.cdiv(m, tile.bt), triton.cdiv(n, tile.bn), splits)](
                    q.view(torch.int32), a, t, w32, layer.scales if ws is None else ws, y, p, pq2_ops._TICKETS[y.device], m, n, k, k // 16,
                    groups, gps, splits, BN=tile.bn, BT=tile.bt, WARPS=tile.warps, GU=tile.bc, RING=0, W_L=w_l,
                    U_L=u_l, GMAJOR=major, SMAJOR=ws is not None, num_warps=tile.warps)
                return y

            ref = pq2_ops.forward(layers[0][0], xs[0], path="gluon", tile=tile)
            for major in (False, True):
                w0 = gm[0] if major else rowm[0]
                assert torch.equal(run(layers[0][0], w0, xs[0], major), ref), f"{name} M={m} GMAJOR={major}"
            assert torch.equal(run(layers[0][0], gm[0], xs[0], True, st[0]), ref), f"{name} M={m} both"
            row = graph_time([lambda l=l, w=w, x=xs[i % 4]: run(l, w, x, False)
                              for i, ((l, _), w) in enumerate(zip(layers, rowm))])
            grp = graph_time([lambda l=l, w=w, x=xs[i % 4]: run(l, w, x, True)
                              for i, ((l, _), w) in enumerate(zip(layers, gm))])
            both = graph_time([lambda l=l, w=w, s=s, x=xs[i % 4]: run(l, w, x, True, s)
                               for i, ((l, _), w, s) in enumerate(zip(layers, gm, st))])
            print(f"gluon {name:8s} M={m} {tile} row-major {row:7.1f} us  group-major {grp:7.1f} us "
                  f"({(grp / row - 1) * 100:+.1f} %)  + scales [G, N] {both:7.1f} us ({(both / row - 1) * 100:+.1f} %)",
                  flush=True)
        del layers, gm, st, rowm
        torch.cuda.empty_cache()


if __name__ == "__main__":
    bw = max(copy_bandwidth(), copy_bandwidth())
    probe(bw)
    gluon_layouts()
