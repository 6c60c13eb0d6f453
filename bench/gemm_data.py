"""Does cuBLAS's prefill GEMM time depend on the operands' dtype and values on this GPU (power-bound
tensor cores slow down when more bits toggle)? Same shape, same call, weight copies > L2:
random bf16 / fp16 operands, the scratch path's real operands (rotated activations, dequantized
int4 weights) in fp16 and the same values rounded to bf16, and the bare nibble codes. The SM clock
and board power are sampled by nvidia-smi while each one replays.

    python3 bench/gemm_data.py --shapes gate_up,down --ms 2048
"""

from __future__ import annotations

import math
import subprocess

import torch

from bench_paro import ROTATE_BYTES, each_shape, paro_layers, shape_args
from timing import graph_time

from radiance.kernels.triton import paro_rotate as pr
from radiance.kernels.triton import paro_scratch


def sampled(fns) -> tuple[float, float, float]:
    """(µs per call, mean SM MHz, mean W) over ~1 s of replays."""
    graph_time(fns, iters=5)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    us = graph_time(fns, iters=300)
    smi.terminate()
    rows = [tuple(map(float, ln.split(","))) for ln in smi.communicate()[0].splitlines() if "," in ln]
    rows = rows[len(rows) // 4:] or rows  # drop the samples before the clocks settle
    return us, sum(r[0] for r in rows) / max(1, len(rows)), sum(r[1] for r in rows) / max(1, len(rows))


def main() -> None:
    args = shape_args("gate_up,down,qkv", "2048")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, sizes, k, n in each_shape(args.shapes):
        copies = max(2, math.ceil(ROTATE_BYTES / (2 * n * k)))
        layer = paro_layers(sizes, k, 1, gen, False)[0]
        deq16 = paro_scratch.dequant(layer.wb, layer.sc, layer.d,
                                     torch.empty(n, k, device="cuda", dtype=torch.float16))
        weights = {
            "randn_bf16": [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)],
            "randn_fp16": [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)],
            "deq_fp16": [deq16] + [deq16.clone() for _ in range(copies - 1)],
            "deq_bf16": [deq16.to(torch.bfloat16) for _ in range(copies)],
            "codes_fp16": [(torch.randint(-8, 8, (n, k), device="cuda", generator=gen)).half() for _ in range(copies)],
        }
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            rot = pr.rotate(x, layer.tables, pr.PLAIN)[0][0]
            acts = {"randn_bf16": x, "randn_fp16": x.half(), "deq_fp16": rot, "deq_bf16": rot.to(torch.bfloat16),
                    "codes_fp16": rot}
            for kind, ws in weights.items():
                a = acts[kind]
                us, mhz, watts = sampled([lambda w=w, a=a: a @ w.t() for w in ws])
                tf = 2 * m * n * k / us / 1e6
                print(f"{name} N={n} K={k} M={m} {kind:11s} {us:8.1f} us {tf:6.0f} TF/s {mhz:6.0f} MHz {watts:5.0f} W",
                      flush=True)
        del weights, deq16


if __name__ == "__main__":
    main()
