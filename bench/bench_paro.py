"""paroquant kernel benchmark (one script, one device call): W4A16 / W4A8 against cuBLAS bf16,
vLLM's own int4 kernels on the same codes (what `awq_marlin` serves: Machete, vLLM's choice on
sm_90, and Marlin's gptq_marlin_gemm), torch's tinygemm int4 (`_weight_int4pack_mm`), gemlite
A16W4 / A8W4 when carried, and the 4.25-bit roofline from the streaming-read bandwidth measured
in this run (timing.run_header). Every timing is the median of CUDA-graph replays over
a rotation of weight copies larger than L2 (random data, never zeros). Also: the prologue alone,
tile variants (best reported beside the default), and one decode step of a 4-layer 27B-class
Qwen-shaped stack against the same stack in bf16.

    python bench/bench_paro.py --out DIR     # writes DIR/results-paro.jsonl and DIR/RESULTS-paro.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import torch

from baselines import gemlite_layer, vllm_awq_layer  # bench/ (run from the repo root or bench/)
from timing import graph_time, run_header

from radiance.kernels import paro_ops as ops
from radiance.kernels.nvidia import pool
from radiance.testing import paro_random as rnd
from radiance.kernels.triton import paro_rotate as pr
from radiance.kernels.triton import paro_scratch

ROTATE_BYTES = 256 << 20  # weight bytes cycled through per replay: > 4x the 60 MB L2
SHAPES = {  # name: partition sizes along N, K (in the order they are measured)
    "gate_up": ([34816], 5120), "down": ([5120], 17408), "qkv_P3": ([12288, 1024, 1024], 5120),
    "gate_up_P2": ([17408, 17408], 5120), "qkv": ([14336], 5120), "out": ([5120], 6144),
}
BASELINE_MS = (1, 2, 4, 8, 16, 64, 512, 2048)  # tinygemm / gemlite timed at these M only
MS = list(range(1, 17)) + [64, 512, 2048]
SWEEP_MS = (1, 4, 16, 2048)
SWEEP_SHAPES = ("gate_up",)


def shape_args(shapes: str, ms: str) -> argparse.Namespace:
    """--shapes / --ms (comma lists, these defaults) of the single-purpose paroquant scripts."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=shapes)
    ap.add_argument("--ms", default=ms)
    return ap.parse_args()


def each_shape(names: str):
    """(name, partition sizes, K, N) for each comma-listed SHAPES name."""
    for name in names.split(","):
        sizes, k = SHAPES[name]
        yield name, sizes, k, sum(sizes)


def paro_layers(sizes, k, count, gen, i8):
    os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
    out = []
    for _ in range(count):
        parts = [rnd.random_layer(n, k, gen) for n in sizes]
        out.append(ops.prepare(*rnd.merged(parts)))
    os.environ.pop("RADIANCE_PQ_I8", None)
    return out


def share_weights(base, count):
    """Copies of a prepared layer with distinct weight buffers (L2 busting) and shared tables."""
    out = [base]
    for _ in range(count - 1):
        out.append(dataclasses.replace(base, wb=base.wb.clone(), sc=base.sc.clone(), d=base.d.clone(), tiles={}))
    return out


def tinygemm_layers(n, k, count):
    out = []
    for _ in range(count):
        wq = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        wp = torch._convert_weight_to_int4pack(wq, 8)
        sz = (torch.rand(k // 128, n, 2, device="cuda") * 0.01).to(torch.bfloat16)
        out.append((wp, sz))
    return out


def vllm_layers(n, k, count, gen, kernel):
    """vLLM's AWQ linear on `kernel` over `count` random layers (distinct weights: L2 busting)."""
    out = []
    for _ in range(count):
        t = rnd.random_layer(n, k, gen)
        out.append(vllm_awq_layer(t.qweight, t.qzeros, t.scales, kernel))
    return out


VLLM_KERNELS = {"machete": "MacheteLinearKernel", "marlin": "MarlinLinearKernel"}


def gemlite_layers(n, k, count, kind):
    out = []
    for _ in range(count):
        codes = torch.randint(0, 16, (n, k), dtype=torch.uint8, device="cuda")
        sc = torch.rand(n, k // 128, device="cuda") * 0.02 + 1e-3
        zeros = torch.randint(2, 15, (n, k // 128), device="cuda")
        out.append(gemlite_layer(codes, sc, zeros, 4, a8=kind == "a8w4"))
    return out


def variants(m, i8):
    """Kinds and tiles tried beside the table's choice (split 0 = the table's, -2 = twice it)."""
    # deqt (W4A16): BN is the wgmma's M side (64 rows per warp group), BM its N side
    deqt = () if i8 else ((128, 128, 8, 3, "deqt"), (256, 128, 8, 3, "deqt"), (128, 256, 8, 3, "deqt"),
                          (64, 128, 4, 4, "deqt"), (128, 64, 4, 4, "deqt"), (256, 64, 4, 3, "deqt"))
    # wgmma (W4A16, sm_90; bm tokens x bn weight rows): fp16 wgmma on weights dequantized into its
    # register operand; elsewhere it raises and the sweep reports and skips it. On 3 stages (offline
    # sm_90): 128 x 64 168 registers, 96 KB of ring -> two programs per SM; 64 x 64 126, 48 KB -> four;
    # 64 x 128 on 8 warps 126, 48 KB -> two. None beat the table's tiles on the H200
    wg = () if i8 else ((128, 128, 8, 3, "wgmma"), (256, 128, 8, 3, "wgmma"), (64, 128, 8, 3, "wgmma"),
                        (128, 64, 4, 3, "wgmma"), (64, 64, 4, 3, "wgmma"), (64, 64, 4, 4, "wgmma"),
                        (128, 64, 4, 4, "wgmma"))
    if m > 64:
        return [ops.Tile(bm, bn, w, st, 1, kind) for bm, bn, w, st, kind in
                ((128, 256, 8, 3, "deq"), (128, 64, 4, 4, "deq"), (256, 128, 8, 3, "deq"), (64, 128, 4, 4, "deq"),
                 (128, 64, 4, 4, "fold"), (64, 64, 4, 4, "deq"), (32, 128, 4, 4, "deq"),
                 (128, 64, 4, 2, "fold"), (128, 64, 4, 3, "fold"), (128, 128, 8, 2, "fold"),
                 (256, 64, 8, 2, "fold"), (256, 128, 8, 2, "fold")) + deqt + wg] + [
        # W4A8 fold 128x64 (packed nibble unpack, FMA epilogue; offline sm_90): 248 registers per
        # thread on 4 stages (2 programs per SM), 188 on 2; capped at 168: 3 programs, 64 stack
        # bytes, 16 spill loads per group
        ops.Tile(128, 64, 4, 2, 1, "fold", maxnreg=r) for r in (168, 128)]
    bm = min(64, max(16, 1 << (m - 1).bit_length()))
    out = [ops.Tile(bm, 64, 4, 4, 0, "deq"), ops.Tile(bm, 256, 8, 3, 0, "deq"), ops.Tile(16, 64, 4, 3, 0, "fold"),
           ops.Tile(16, 128, 4, 4, 0, "fold")]
    if not i8:
        out += [ops.Tile(bm, bn, w, st, sp, "deqt") for bn, w, st, sp in
                ((64, 4, 4, 0), (128, 4, 4, 0), (128, 8, 3, 0), (64, 4, 4, -2), (128, 4, 3, -2),
                 (64, 4, 2, 0), (128, 4, 2, 0), (64, 4, 2, -2))]
    if not i8:  # the sm_90 fused kind with its smallest token tile: on the wide layers pq2's wgmma
        # kernel beat its decode-band kernel from M = 17 on the H200; not yet timed for paroquant
        out += [ops.Tile(64, bn, w, st, 1, "wgmma") for bn, w, st in ((128, 8, 3), (64, 4, 3), (64, 4, 4))]
    if not i8 and m <= 4:
        out += [ops.Tile(1, bn, w, st, sp, "gemv", gpi) for bn, w, st, sp, gpi in
                ((64, 4, 3, 0, 1), (64, 4, 3, 0, 2), (64, 4, 3, 0, 4), (128, 4, 3, 0, 4), (128, 8, 3, 0, 4),
                 (64, 4, 1, 0, 4), (32, 4, 3, 0, 4), (64, 4, 3, -2, 4), (128, 4, 3, -2, 2), (256, 8, 3, 0, 2))]
    return out


def path_name(layer, m):
    """What ops.forward runs for m rows: the scratch + cuBLAS path or the planned kernel's tile."""
    if ops.kind_for(layer, m) == "scratch":
        return "scratch+cuBLAS"
    return str(ops.tile_for(layer, m))


def with_split(layer, m, t):
    if m > 64:
        return t
    base = ops.tile_for(layer, m, "deq" if layer.i8 else "deqt").split if ops.kind_for(layer, m) == "scratch" \
        else ops.tile_for(layer, m).split
    sp = base if t.split == 0 else min(16, base * 2) if t.split == -2 else t.split
    # the layer reserved partials for its own splits only: grow them for the swept one
    pool.reserve(layer.wb.device, sp * m * layer.n)
    return dataclasses.replace(t, split=sp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweep-shapes", default=",".join(SWEEP_SHAPES), help="shapes whose tiles are swept")
    ap.add_argument("--ms", default=",".join(map(str, MS)), help="row counts timed (comma list)")
    ap.add_argument("--sweep-ms", default=",".join(map(str, SWEEP_MS)), help="row counts whose tiles are swept")
    ap.add_argument("--scratch-rows", default="", help="also time the scratch path with the weight dequantized in "
                    "pieces of these rows (comma list, 0 = whole; RADIANCE_PQ_SCRATCH_ROWS) at every prefill M")
    ap.add_argument("--sweep-kinds", default="", help="only these kinds' tiles are swept (comma list; default all)")
    ap.add_argument("--no-extras", action="store_true", help="skip the prologue-alone and 4-layer stack timings")
    args = ap.parse_args()
    sweep_ms = set(map(int, args.sweep_ms.split(",")))
    torch.manual_seed(0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    date, gpu, bw = run_header()
    gl_ok = True
    try:
        import gemlite
        cfg = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
        gemlite.set_autotune(False)
        if os.path.exists(cfg):
            gemlite.load_config(cfg)
        print(f"# gemlite {gemlite.__version__}", flush=True)
    except Exception as e:  # reported: the rows carry gemlite_us = null
        gl_ok = False
        print(f"# gemlite unavailable: {e!r}", flush=True)
    rows = []

    def emit(row):
        row = {"date": date, "gpu": gpu, "commit": os.environ.get("BENCH_COMMIT", "unknown"), "method": "paroquant", **row}
        rows.append(row)
        with open(os.path.join(args.out, "results-paro.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")

    for part in (() if args.no_extras else (bench_prologue, bench_stack)):
        try:
            part(gen, emit)
        except Exception as e:  # reported; the shape rows still run
            print(f"# {part.__name__} failed: {type(e).__name__}: {e}", flush=True)

    for name in args.shapes.split(","):
        sizes, k = SHAPES[name]
        n = sum(sizes)
        wbytes = n * k * 4.25 / 8
        copies = max(2, math.ceil(ROTATE_BYTES / wbytes))
        t0 = time.time()
        base16 = paro_layers(sizes, k, 1, gen, False)[0]
        base8 = paro_layers(sizes, k, 1, gen, True)[0]
        p16, p8 = share_weights(base16, copies), share_weights(base8, copies)
        wbf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(max(2, math.ceil(ROTATE_BYTES / (2 * n * k))))]
        tg = None
        if len(sizes) == 1:
            try:
                tg = tinygemm_layers(n, k, copies)
            except Exception as e:
                print(f"# tinygemm {name}: {e!r}", flush=True)
        vls = {}
        for col, kernel in (VLLM_KERNELS.items() if len(sizes) == 1 else ()):
            try:
                vls[col] = vllm_layers(n, k, copies, gen, kernel)
            except Exception as e:  # reported: the rows carry <col>_us = null
                print(f"# vLLM {kernel} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        gls = {}
        if gl_ok and len(sizes) == 1:
            for kind in ("a16w4", "a8w4"):
                try:
                    gls[kind] = gemlite_layers(n, k, copies, kind)
                except Exception as e:
                    print(f"# gemlite {kind} {name}: {e!r}", flush=True)
        print(f"# {name} N={n} K={k} copies={copies} setup {time.time() - t0:.1f}s", flush=True)
        for m in map(int, args.ms.split(",")):
            roof = wbytes / bw * 1e6  # the weight read once at this run's streaming-read rate
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
            cub = graph_time([lambda w=w, x=xs[i % 4]: x @ w.t() for i, w in enumerate(wbf)])
            tgt = None
            if tg and m in BASELINE_MS:
                try:
                    tgt = graph_time([lambda w=w, x=xs[i % 4]: torch._weight_int4pack_mm(x, w[0], 128, w[1])
                                      for i, w in enumerate(tg)])
                except Exception as e:
                    print(f"# tinygemm {name} M={m}: {e!r}", flush=True)
                    tg = None
            ext = {}  # the other libraries' layers (x -> y), timed at BASELINE_MS
            for col, fns in ({**vls, **gls}.items() if m in BASELINE_MS else ()):
                try:
                    ext[col] = graph_time([lambda f=f, x=xs[i % 4]: f(x) for i, f in enumerate(fns)])
                except Exception as e:
                    print(f"# {col} {name} M={m}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            line = []
            runs = [("w4a16", p16, "a16w4"), ("w4a8", p8, "a8w4")]
            if ops.kind_for(p16[0], m) not in ("scratch", "mma_gl", "gemv_gl", "gemv", "deqt"):
                # the dequant-to-scratch + cuBLAS path on the same weights, paired in this run
                pool.reserve(p16[0].wb.device, deq=n * k)
                runs.append(("w4a16_scratch", [ops.with_kernel(l, "scratch") for l in p16], None))
            for piece in (map(int, args.scratch_rows.split(",")) if args.scratch_rows and m > 64 else ()):
                # the scratch path at every prefill M (no wgmma band), whole or in pieces, paired in this run
                pool.reserve(p16[0].wb.device, deq=n * k)
                paro_scratch.side_stream(p16[0].wb.device)
                runs.append((f"w4a16_scratch_r{piece}", [dataclasses.replace(ops.with_kernel(l, "scratch"),
                                                                            scratch_rows=piece) for l in p16], None))
            for label, layers, gkind in runs:
                try:
                    us = graph_time([lambda l=l, x=xs[i % 4]: ops.forward(l, x) for i, l in enumerate(layers)])
                except Exception as e:
                    print(f"# {label} {name} M={m}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                best, best_t, tried = us, path_name(layers[0], m), {}
                if not args.no_sweep and label != "w4a16_scratch" and m in sweep_ms and name in args.sweep_shapes.split(","):
                    for t in variants(m, label == "w4a8"):
                        if args.sweep_kinds and t.kind not in args.sweep_kinds.split(","):
                            continue
                        t = with_split(layers[0], m, t)
                        try:
                            v = graph_time([lambda l=l, x=xs[i % 4]: ops.forward(l, x, tile=t)
                                            for i, l in enumerate(layers)], iters=10)
                        except Exception as e:
                            print(f"# {label} {name} M={m} {t}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                            continue
                        tried[str(t)] = round(v, 2)
                        if v < best:
                            best, best_t = v, t
                gl_us = ext.get(gkind)
                emit({"path": label, "N": n, "K": k, "M": m, "us": round(us, 2), "roofline_us": round(roof, 2),
                      "cublas_bf16_us": round(cub, 2), "gemlite_us": gl_us and round(gl_us, 2),
                      "tinygemm_us": tgt and round(tgt, 2), "machete_us": _r(ext.get("machete")),
                      "marlin_us": _r(ext.get("marlin")), "shape": name, "tile": path_name(layers[0], m),
                      "best_us": round(best, 2), "best_tile": str(best_t), "tried_us": tried or None})
                line.append(f"{label}={us:7.1f}(best {best:7.1f})")
            print(f"{name:10s} M={m:5d} roof={roof:6.1f} cublas={cub:7.1f} tiny={tgt or float('nan'):7.1f} "
                  f"machete={ext.get('machete', float('nan')):7.1f} marlin={ext.get('marlin', float('nan')):7.1f} "
                  f"gl16={ext.get('a16w4', float('nan')):7.1f} gl8={ext.get('a8w4', float('nan')):7.1f} "
                  + " ".join(line), flush=True)
        del p16, p8, base16, base8, wbf, tg, gls, vls
        torch.cuda.empty_cache()
    write_md(rows, os.path.join(args.out, "RESULTS-paro.md"), gpu, bw)


def _r(v):
    return None if v is None else round(v, 2)


def bench_prologue(gen, emit):
    for parts, k in ((1, 5120), (3, 5120), (1, 17408)):
        t = [rnd.random_layer(128, k, gen) for _ in range(parts)]
        tab = pr.build_tables([rnd.rotation_of(x) for x in t])
        for m in (1, 16, 2048):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for mode, label in ((pr.F16G, "prologue_f16"), (pr.I8G, "prologue_i8"), (pr.ROT32P, "prologue_rot32p")):
                dt = {pr.F16G: torch.float16, pr.I8G: torch.int8, pr.ROT32P: torch.float32}[mode]
                out = (torch.empty(parts, m, k, device="cuda", dtype=dt),
                       torch.empty(parts, m, k // 128, device="cuda"), torch.empty(parts, m, k // 128, device="cuda"))
                us = graph_time([lambda: pr.rotate(x, tab, mode, out)] * 20)
                emit({"path": label, "N": None, "K": k, "M": m, "P": parts, "us": round(us, 2), "roofline_us": None,
                      "cublas_bf16_us": None, "gemlite_us": None, "tinygemm_us": None})
                print(f"{label} P={parts} K={k} M={m}: {us:.2f} us", flush=True)


def bench_stack(gen, emit, layers=4):
    """One decode step (M=1) of a 4-layer 27B-class Qwen-shaped stack: qkv (P=3) -> o (K=6144) ->
    gate_up (P=2) -> silu*mul -> down, residual adds; attention itself left out (same in both)."""
    h = 5120
    stack = []
    for _ in range(layers):
        stack.append([ops.prepare(*rnd.merged([rnd.random_layer(n, kk, gen) for n in sizes]))
                      for sizes, kk in (([12288, 1024, 1024], h), ([5120], 6144), ([17408, 17408], h), ([5120], 17408))])
    dense = [[torch.randn(sum(s), kk, device="cuda", dtype=torch.bfloat16) * 0.01
              for s, kk in (([14336], h), ([5120], 6144), ([34816], h), ([5120], 17408))] for _ in range(layers)]
    x0 = torch.randn(1, h, device="cuda", dtype=torch.bfloat16)

    def step(lin):
        x = x0
        for layer in range(layers):
            qkv = lin(layer, 0, x)
            x = x + lin(layer, 1, qkv[:, :6144].contiguous())
            gu = lin(layer, 2, x)
            x = x + lin(layer, 3, torch.nn.functional.silu(gu[:, :17408]) * gu[:, 17408:])
        return x

    paro = graph_time([lambda: step(lambda i, j, x: ops.forward(stack[i][j], x))], iters=30)
    bf = graph_time([lambda: step(lambda i, j, x: x @ dense[i][j].t())], iters=30)
    for label, us in (("stack4_decode_paro_w4a16", paro), ("stack4_decode_bf16", bf)):
        emit({"path": label, "N": None, "K": h, "M": 1, "us": round(us, 2), "roofline_us": None,
              "cublas_bf16_us": round(bf, 2), "gemlite_us": None, "tinygemm_us": None})
    print(f"4-layer decode step: paro {paro:.1f} us, bf16 {bf:.1f} us ({bf / paro:.2f}x)", flush=True)


def write_md(rows, path, gpu, bw):
    lines = [f"# paroquant kernels on {gpu} (streaming read {bw / 1e9:.0f} GB/s)", "",
             "| shape | N | K | M | path | µs | best µs (tile) | roofline | cuBLAS bf16 | Machete | Marlin | tinygemm | gemlite |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("shape"):
            f = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
            lines.append(f"| {r['shape']} | {r['N']} | {r['K']} | {r['M']} | {r['path']} | {r['us']:.1f} | "
                         f"{r['best_us']:.1f} ({r['best_tile']}) | {f(r['roofline_us'])} | {f(r['cublas_bf16_us'])} | "
                         f"{f(r.get('machete_us'))} | {f(r.get('marlin_us'))} | "
                         f"{f(r['tinygemm_us'])} | {f(r['gemlite_us'])} |")
    lines += ["", "| other | K | M | P | µs |", "|---|---|---|---|---|"]
    for r in rows:
        if not r.get("shape"):
            lines.append(f"| {r['path']} | {r['K']} | {r['M']} | {r.get('P', '')} | {r['us']:.1f} |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
