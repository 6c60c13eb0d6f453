"""Numerics of the gfx1201 paroquant kernels built as CUDA (emulated WMMA) on an NVIDIA GPU, as a
markdown table on stdout.

    python3 bench/hip_numerics.py LIB.so [LIB_WPERM0.so]

Per shape and M: relative error of the kernel output (bf16, the model's dtype) against
kernels/reference.py with the same activation quantization (bf16 out), of the f16 GEMM against the
exact fp32 reference, the share of e4m3 codes that differ from the reference quantizer, and the
kernel time. The time is the CUDA emulation's (warp shuffles for every WMMA), NOT a prediction of the
R9700: it is recorded only so that a regression in the emulated path shows.
"""

from __future__ import annotations

import sys

import torch

from radiance.kernels import reference
from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip.layout import prepare
from radiance.testing.paro_random import random_layer, rel

SHAPES = [  # (name, partition widths, K)
    ("qkv 896 -> 512+128+128 (3 rotations)", [512, 128, 128], 896),
    ("gate_up 896 -> 2x4864", [4864, 4864], 896),
    ("down 4864 -> 896", [896], 4864),
    ("27B o_proj-like 6144 -> 5120", [5120], 6144),
]
MS = [1, 7, 64, 65, 257]


def _time(fn, reps: int = 3) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e3


def main(paths: list[str]) -> None:
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| wperm | shape | M | band | rel bf16 vs ref (bf16) | rel f16 vs exact fp32 | codes differing | us (emulated) |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        lib = pqlib.load(path)
        for si, (name, widths, k) in enumerate(SHAPES):
            gen = torch.Generator().manual_seed(1000 + si)
            parts = [random_layer(n, k, gen) for n in widths]
            parts = [type(t)(*(getattr(t, f).cuda() for f in ("qweight", "qzeros", "scales", "pairs", "theta",
                                                                "channel_scales"))) for t in parts]
            prep = prepare(parts, wperm=lib.wperm)
            for m in MS:
                x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
                decode = m <= 64
                act = "fp8_group" if decode else "fp8_token"
                y = pqlib.linear(lib, x, prep)
                ref = torch.cat([reference.paroquant_linear(x, t, act=act) for t in parts], dim=1)
                exact = torch.cat([reference.paroquant_linear(x.float(), t, act=act) for t in parts], dim=1)
                a, asr = pqlib.rotate_quant(lib, x, prep, per_token=not decode)
                y16 = pqlib.gemm(lib, a, asr, prep, torch.float16, decode=decode)
                # codes vs the reference quantizer, rotation by rotation (partition starts)
                bad, total = 0, 0
                starts = [0] + [b for b in (prep.pb1, prep.pb2) if b < prep.out_features]
                for r, s0 in enumerate(starts):
                    t = next(p for p, c in zip(parts, _col_starts(widths)) if c == s0)
                    # quantized on the CPU: torch on CUDA divides by the scalar 448 as * (1/448)
                    xr = reference.rotate(x, t.pairs, t.theta, t.channel_scales).cpu()
                    q, _ = reference.quant_fp8_e4m3_group(xr) if decode else reference.quant_fp8_e4m3_token(xr)
                    want = q.view(torch.uint8).clone()
                    want[want == 0x80] = 0
                    bad += int((a[r].cpu() != want).sum())
                    total += want.numel()
                us = _time(lambda: pqlib.linear(lib, x, prep))
                print(f"| {int(lib.wperm)} | {name} | {m} | {'decode' if decode else 'prefill'} | "
                      f"{rel(y, ref):.2e} | {rel(y16, exact):.2e} | {bad}/{total} | {us:.0f} |", flush=True)


def _col_starts(widths: list[int]) -> list[int]:
    out, c = [], 0
    for w in widths:
        out.append(c)
        c += w
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
