"""paroquant on NVIDIA, one module per GEMM kind (this package's modules; docs/nvidia.md has the
resulting band -> kernel table per card): `mma_gl` and `gemv_gl` (Gluon: tensor cores / CUDA cores),
`gemv` (Triton, CUDA cores), `deqt` and `deq` (Triton: the weights dequantized in registers as the
MMA's A / B operand), `fold` (W4A8 prefill), `wgmma` (sm_90) and `scratch` (dequantize, then
cuBLAS). Each owns the rows it is meant for and its checks (its registry entries), the activation
format it reads (MODE: paro_rotate's output modes), its tile and shared memory, and its launch.
`KERNELS` is their priority order; kernels/registry.py plans a layer's rows from it at prepare
(paro_ops.prepare). Unit-tested on CPU with faked capabilities. W4A8 needs int8 tensor-core
dots (sm_80+).
"""

from __future__ import annotations

import torch
import triton

from radiance.kernels.config import KernelConfig, needs_card
from radiance.kernels.nvidia.paroquant import deq, deqt, fold, gemv, gemv_gl, mma_gl, scratch, wgmma
from radiance.kernels.nvidia.paroquant.common import TURING_GEMV_MAX_M  # noqa: F401 -- the tests' and docs' name
from radiance.kernels.nvidia.paroquant.mma_gl import stream_tile  # noqa: F401
from radiance.kernels.nvidia.paroquant.wgmma import WGMMA_BT128_MAX_M, WGMMA_MAX_M  # noqa: F401
from radiance.kernels.nvidia.tile import Tile, fit
from radiance.kernels.registry import register
from radiance.kernels.triton import paro_rotate
from radiance.kernels.triton.split_finish import stream_programs

KINDS = {k.NAME: k for k in (mma_gl, gemv_gl, gemv, wgmma, scratch, deqt, deq, fold)}
W4A16_ONLY = tuple(name for name, k in KINDS.items() if k.W4A16_ONLY)  # multiply fp16/fp32 activations only

# Priority order. mma_gl takes M = 1..16 on sm_80+; Turing keeps decode rows on the Gluon GEMV up to
# TURING_GEMV_MAX_M and dequantizes to the scratch above; the W4A16 prefill runs the scratch path
# except wgmma's band on sm_90's wide layers; wgmma, then deq take every prefill row when the
# scratch path is disabled. W4A8 keeps its int8 GEMMs (deq, fold): the scratch path multiplies fp16
# activations.
KERNELS = register([mma_gl.SPEC, gemv_gl.SPEC, gemv.SPEC, wgmma.WIDE, scratch.SPEC, wgmma.PREFILL, deqt.SPEC,
                    deq.W4A16, deq.W4A8, fold.SPEC])


def use_int8(cap: tuple[int, int], config: KernelConfig) -> bool:
    """RADIANCE_PQ_I8: W4A8, on cards with int8 tensor-core dots (an error naming the knob below)."""
    return needs_card("RADIANCE_PQ_I8", config.i8, cap, (8, 0), "int8 tensor-core dots", "W4A16")


def prologue_mode(kind: str, i8: bool) -> int:
    """The activation format a GEMM kind reads (paro_rotate's output modes): int8 per group for W4A8."""
    return paro_rotate.I8G if i8 else KINDS[kind].MODE


def smem_bytes(t: Tile, act_bytes: int) -> int:
    """Shared memory the tile's GEMM asks for."""
    return KINDS[t.kind].smem(t, act_bytes)


def fit_tile(t: Tile, limit: int, act_bytes: int = 2) -> Tile:
    return fit(t, limit, KINDS[t.kind].smem, act_bytes)


def decode_tile(kind: str, m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    """The split-K tile of a decode-band kind (mma_gl, gemv_gl, gemv, deqt, deq) for M rows."""
    make = KINDS[kind].decode_tile if kind in KINDS else None
    if make is None:
        raise ValueError(f"paroquant: {kind!r} is no decode-band kind")
    return make(m, n, groups, sms, cap, i8)


def prefill_tile(kind: str, cap: tuple[int, int], m: int = 2048) -> Tile:
    """The tile of a prefill-band kind (wgmma, deq, fold)."""
    make = KINDS[kind].prefill_tile if kind in KINDS else None
    if make is None:
        raise ValueError(f"paroquant: {kind!r} is no prefill-band kind")
    return make(cap, m)


def launches_dependent(t: Tile) -> bool:
    """Whether the tile's GEMM launches dependent on its prologue where the GPU can (kernels/pdl.py)."""
    return getattr(KINDS[t.kind], "dependent", lambda t: False)(t)


def gemm(a, s, rs, wb, sc, d, y, t: Tile, *, pb1: int, pb2: int, part: torch.Tensor | None,
         cnt: torch.Tensor | None, bias: torch.Tensor | None = None, programs: int = 0, pdl: bool = False):
    """y [M, N] (+ bias, added before the one rounding) from prologue outputs a [P, M, K] (+ s/rs
    [P, M, G] for the folded kinds) on tile t's kind (triton/paro_gemm.py documents the arithmetic).
    programs > 0 (mma_gl): a stream-K grid of that many programs instead of tiles x split
    (stream_programs). pdl (mma_gl): launched dependent on the prologue before it (kernels/pdl.py)."""
    kind = KINDS[t.kind]
    _, m, k = a.shape
    g, n, _ = wb.shape
    if pdl and (kind is not mma_gl or programs):
        raise ValueError(f"paroquant {t.kind}: only mma_gl on a tiles x split grid launches dependent on its prologue")
    if programs and kind is not mma_gl:
        raise ValueError(f"paroquant {t.kind}: a stream-K grid (programs={programs}) is mma_gl's only")
    if g % t.gpi or (t.gpi > 1 and kind not in (gemv, gemv_gl)):
        raise ValueError(f"paroquant {t.kind}: {t.gpi} groups per iteration must divide the {g} groups (gemv only)")
    gps = triton.cdiv(triton.cdiv(g, t.split), t.gpi) * t.gpi
    split = triton.cdiv(g, gps)
    grid = (triton.cdiv(m, t.bm), triton.cdiv(n, t.bn), split)
    if programs:
        progs, split = stream_programs(programs, m, n, t.bm, t.bn, g)
        grid = (1, 1, progs)
    if part is None or cnt is None or part.dtype != torch.float32 or cnt.dtype != torch.int32:
        raise RuntimeError("paroquant GEMM needs its fp32 partial and int32 ticket scratch")
    if split > 1 and (part.numel() < split * m * n or cnt.numel() < triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)):
        raise RuntimeError(
            f"paroquant split-K scratch too small for split={split} M={m} N={n}; "
            "reserve it with radiance.kernels.nvidia.pool.reserve before graph capture")
    s = part if s is None else s  # unused by the kinds that take no activation scales / sums
    rs = part if rs is None else rs
    if kind.WORDS:
        wb = wb.view(torch.int32)  # the same bytes as words [G, N, 16]
    args = (a, s, rs, wb, sc, d, y, part if bias is None else bias, part, cnt, m, n, k, g, pb1, pb2, gps, split)
    kind.launch(grid, args, t, bias is not None, programs, pdl)
    return y
