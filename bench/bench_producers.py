"""Fused producers, per decoder layer (one device call): a 27B-width Qwen layer's four paroquant
linears with the ops that feed them, at M = 1, 4, 16, with and without the producers, against the
read roofline of the four weights and same-run anchors (cuBLAS bf16; vLLM's Marlin on the same
int4 codes when vLLM is installed).

    unfused: add+RMSNorm -> qkv (prologue, GEMM) -> o (prologue, GEMM) -> add+RMSNorm -> gate_up
             (prologue, GEMM) -> silu*mul -> down (prologue, GEMM)
    fused:   producer+qkv GEMM -> o (prologue, GEMM) -> producer+gate_up GEMM -> producer+down GEMM

The norms and silu*mul of the unfused path, the bf16 and Marlin rows are inductor's fused kernels
(torch.compile of reference.py: what vLLM's compiled graph runs for them). Attention itself is
left out (the same in every row). Every timing: median CUDA-graph replay over layer copies larger
than L2, random data.

    python bench/bench_producers.py --out DIR   # DIR/results-producers.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from timing import graph_time, run_header

from radiance.kernels import paro_ops, reference
from radiance.kernels.producers import AddRmsNorm, SiluMul
from radiance.testing import paro_random as rnd

H, O, I = 5120, 6144, 17408  # hidden, attention output (48 heads x 128), intermediate
LINEARS = (([12288, 1024, 1024], H), ([5120], O), ([I, I], H), ([5120], I))  # qkv, o, gate_up, down
COPIES = 2  # 2 x 186 MB of int4 weights per replay: > 4x the 60 MB L2


def weight_bytes() -> int:
    # int4 codes + fp16 scales + int4 zeros per 128-group, the bytes the GEMMs must read
    return sum(sum(n) * k // 2 + sum(n) * (k // 128) * 2 + sum(n) * (k // 128) // 2 for n, k in LINEARS)


def paro_copies(gen, i8: bool):
    os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
    try:
        return [[paro_ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen) for n in sizes])) for sizes, k in LINEARS]
                for _ in range(COPIES)]
    finally:
        os.environ.pop("RADIANCE_PQ_I8", None)


def steps(m: int, gen):
    """The layer step functions over shared activations: unfused / fused paroquant, bf16, Marlin."""
    x = torch.randn(m, H, device="cuda", generator=gen).bfloat16()
    res = torch.randn(m, H, device="cuda", generator=gen).bfloat16()
    att = torch.randn(m, O, device="cuda", generator=gen).bfloat16()  # the attention output o reads
    w1, w2 = (1 + 0.1 * torch.randn(H, device="cuda", generator=gen)).bfloat16(), torch.ones(H, device="cuda").bfloat16()
    norm = torch.compile(reference.add_rms_norm, dynamic=False)
    act = torch.compile(reference.silu_mul, dynamic=False)

    def unfused(lin):
        h, r = norm(x, res, w1, 1e-6)
        lin(0, h)
        r2 = lin(1, att)
        h, r = norm(r2, r, w2, 1e-6)
        return lin(3, act(lin(2, h)))

    def fused(layers):
        p = AddRmsNorm(x, res, w1, 1e-6)
        paro_ops.forward_produced(layers[0], p)
        r2 = paro_ops.forward(layers[1], att)
        p2 = AddRmsNorm(r2, p.residual_out, w2, 1e-6)
        gu = paro_ops.forward_produced(layers[2], p2)
        return paro_ops.forward_produced(layers[3], SiluMul(gu))

    return unfused, fused


def bench_sites(gen, emit) -> None:
    """Each producer site alone at M = 1, 4, 16: the producer kernel against the unfused norm (vLLM's
    own fused_add_rms_norm kernel where vLLM is installed, else inductor's) + the prologue, and the
    unfused silu*mul (inductor's) + the prologue, in the format the layer's GEMM reads."""
    from radiance.kernels.nvidia.paroquant import prologue_mode
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton import paro_rotate as pr

    try:
        from vllm import _custom_ops as vops  # noqa: F401
        norm_label = "vllm_c"

        def norm(x, r, w):
            vops.fused_add_rms_norm(x, r, w, 1e-6)
            return x, r
    except ImportError:
        norm_label, cnorm = "inductor", torch.compile(reference.add_rms_norm, dynamic=False)

        def norm(x, r, w):
            return cnorm(x, r, w, 1e-6)
    act = torch.compile(reference.silu_mul, dynamic=False)
    for name, (sizes, k) in (("qkv", LINEARS[0]), ("gate_up", LINEARS[2]), ("down", LINEARS[3])):
        layer = paro_ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen) for n in sizes]))
        tab = layer.tables
        for m in (1, 4, 16):
            mode = prologue_mode(paro_ops.tile_for(layer, m).kind, layer.i8)
            w = torch.ones(k, device="cuda").bfloat16()
            if name == "down":
                gu = torch.randn(m, 2 * k, device="cuda", generator=gen).bfloat16()
                un = graph_time([lambda: pr.rotate(act(gu), tab, mode)] * 20)
                fu = graph_time([lambda: pp.silu_mul_rotate(gu, tab, mode)] * 20)
            else:
                x, r = (torch.randn(m, k, device="cuda", generator=gen).bfloat16() for _ in range(2))
                un = graph_time([lambda: pr.rotate(norm(x, r, w)[0], tab, mode)] * 20)
                fu = graph_time([lambda: pp.add_norm_rotate(x, r, w, 1e-6, tab, mode)] * 20)
            emit({"path": f"site_{name}", "M": m, "P": tab.parts, "mode": mode, "unfused_us": round(un, 2),
                  "fused_us": round(fu, 2), "norm": norm_label})
            print(f"site {name} P={tab.parts} M={m} mode {mode}: unfused ({norm_label} norm / silu-mul + prologue) "
                  f"{un:.2f} us, producer {fu:.2f} us", flush=True)
    from radiance.kernels import pq2_ops

    for name, k in (("gate_up", H), ("down", I)):  # pq2: its activation quantizer computing the op
        w = torch.ones(k, device="cuda").bfloat16()
        for m in (1, 4, 16):
            if name == "down":
                gu = torch.randn(m, 2 * k, device="cuda", generator=gen).bfloat16()
                un = graph_time([lambda: pq2_ops.quantize_activations(act(gu), True)] * 20)
                fu = graph_time([lambda: pq2_ops.quantize_activations(gu, True, producer=SiluMul(gu))] * 20)
            else:
                x, r = (torch.randn(m, k, device="cuda", generator=gen).bfloat16() for _ in range(2))
                un = graph_time([lambda: pq2_ops.quantize_activations(norm(x, r, w)[0], True)] * 20)
                fu = graph_time([lambda: pq2_ops.quantize_activations(x, True, producer=AddRmsNorm(x, r, w, 1e-6))] * 20)
            emit({"path": f"pq2_site_{name}", "M": m, "unfused_us": round(un, 2), "fused_us": round(fu, 2),
                  "norm": norm_label})
            print(f"pq2 site {name} M={m}: unfused ({norm_label} norm / silu-mul + quantizer) {un:.2f} us, "
                  f"producer {fu:.2f} us", flush=True)


def marlin_copies(gen):
    try:
        from baselines import vllm_awq_layer
        out = []
        for _ in range(COPIES):
            fns = []
            for sizes, k in LINEARS:
                t = rnd.random_layer(sum(sizes), k, gen)
                fns.append(vllm_awq_layer(t.qweight, t.qzeros, t.scales, "MarlinLinearKernel"))
            out.append(fns)
        return out
    except ImportError as e:
        print(f"# Marlin: not timed ({e})", flush=True)
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--ms", default="1,4,16")
    ap.add_argument("--no-i8", action="store_true", help="skip the W4A8 rows")
    ap.add_argument("--sites", action="store_true", help="also time each producer site alone")
    args = ap.parse_args()
    date, gpu, bw = run_header()
    roof = weight_bytes() / bw * 1e6
    commit = os.environ.get("BENCH_COMMIT", "unknown")
    gen = torch.Generator(device="cuda").manual_seed(0)
    dense = [[torch.randn(sum(n), k, device="cuda", generator=gen).bfloat16() * 0.02 for n, k in LINEARS]
             for _ in range(COPIES)]
    marlin = marlin_copies(gen)
    rows = []
    if args.sites:
        bench_sites(gen, rows.append)
    for i8 in (False,) if args.no_i8 else (False, True):
        copies = paro_copies(gen, i8)
        for m in map(int, args.ms.split(",")):
            unfused, fused = steps(m, gen)
            t = {"unfused": graph_time([lambda c=c: unfused(lambda j, a: paro_ops.forward(c[j], a)) for c in copies]),
                 "fused": graph_time([lambda c=c: fused(c) for c in copies])}
            if not i8:
                t["bf16"] = graph_time([lambda d=d: unfused(lambda j, a: a @ d[j].t()) for d in dense])
                if marlin:
                    t["marlin"] = graph_time([lambda f=f: unfused(lambda j, a: f[j](a)) for f in marlin])
            for path, us in t.items():
                rows.append({"path": f"layer_{path}" + ("_w4a8" if i8 and path != "bf16" else ""), "M": m,
                             "us": round(us, 2), "roofline_us": round(roof, 2), "x_roofline": round(us / roof, 3)})
            print(f"M={m} {'W4A8' if i8 else 'W4A16'}: " + ", ".join(f"{p} {us:.1f} us ({us / roof:.2f}x)"
                                                                   for p, us in t.items())
                  + f"; roofline {roof:.1f} us; fused/unfused {t['unfused'] / t['fused']:.2f}x", flush=True)
        del copies
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results-producers.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps({**row, "date": date, "gpu": gpu, "commit": commit}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
