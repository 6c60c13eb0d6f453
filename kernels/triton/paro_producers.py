"""Fused producers: the op before a rotated linear writes that linear's prologue output directly.

`add_norm_rotate`: residual add + RMSNorm + rotation (+ the GEMM's activation format, quantized
for W4A8), the residual out written on the way; `silu_mul_rotate`: silu(gate) * up + rotation.
Both compute the unfused ops' numerics (reference.add_rms_norm / reference.silu_mul: the same
roundings to the activation dtype) and then run the prologue's own code (paro_rotate.givens,
paro_rotate.store_group), so their outputs are the prologue's on the same normalized rows.

One program per (128-group, row block, rotated copy), as the prologue's. The norm needs the whole
row's sum of squares, so each program reads its rows in full: at one row that is a few KB from L2
per program, cheaper than the launch and the activation round trip it replaces; above
FUSED_MAX_M the callers run the unfused ops instead.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radiance.kernels.triton import interpreting
from radiance.kernels.triton.producer_math import normed as _normed, row_rinv, silu_mul as _silu_mul
from radiance.kernels.triton.paro_rotate import GROUP, RotTables, givens, outputs, prologue_tile, returned, store_group

PRODUCER_MAX_M = 16  # rows the kernels take (and are gated on)
# rows each producer is used for: where the H200 times it below the unfused pair it replaces
# (bench/bench_producers.py --sites). The norm producer reads its rows once per (group, copy), which
# costs more than the launch it saves from 4 rows on; the silu-mul one reads nothing twice.
FUSED_MAX_M = {"norm": 1, "silu_mul": 16}
INTERPRET = interpreting()  # read once, when the kernels are decorated (as Triton reads it)
ROW_CHUNK = 4096  # elements of the rows a norm program sums per step (BM rows x ROW_CHUNK / BM columns)


def in_band(producer) -> bool:
    """Whether the producer's rows run fused (FUSED_MAX_M); the callers run the ops unfused above."""
    return 0 < producer.rows <= FUSED_MAX_M[producer.KIND]


@triton.jit
def _add_norm_rotate_kernel(X, R, W, RO, PARTNER, COS, SSIN, CS, A, S, RS, M, K: tl.constexpr, G, eps, stride_xm,
                            stride_rm, KROT: tl.constexpr, BM: tl.constexpr, OUT_MODE: tl.constexpr,
                            HAS_RES: tl.constexpr, TRIGGER: tl.constexpr, CHUNK: tl.constexpr):
    if TRIGGER:  # the GEMM launched after it (programmatic dependent launch, sm_90) may start now
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    rmask = rows < M
    ss = tl.zeros([BM], dtype=tl.float32)
    for c0 in tl.static_range(0, K, CHUNK):  # the rows' sum of squares, every program for itself, unrolled
        c = c0 + tl.arange(0, CHUNK)  # (K is a constexpr) so that every chunk's loads are in flight at once
        msk = rmask[:, None] & (c < K)[None, :]
        z = tl.load(X + rows[:, None] * stride_xm + c[None, :], mask=msk, other=0.0).to(tl.float32)
        if HAS_RES:
            z += tl.load(R + rows[:, None] * stride_rm + c[None, :], mask=msk, other=0.0).to(tl.float32)
        ss += tl.sum(z * z, axis=1)
    r = tl.math.rsqrt(ss / K + eps)
    cols = tl.arange(0, 128)
    kk = g * 128 + cols
    p = tl.program_id(2)
    z = tl.load(X + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    if HAS_RES:
        z += tl.load(R + rows[:, None] * stride_rm + kk[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
        if p == 0:  # the residual out, once
            tl.store(RO + rows[:, None] * K + kk[None, :], z.to(RO.dtype.element_ty), mask=rmask[:, None])
    x = _normed(z, r[:, None], tl.load(W + kk)[None, :], X.dtype.element_ty)
    store_group(givens(x, PARTNER, COS, SSIN, CS, p, K, kk, KROT, BM), A, S, RS, rows, cols, rmask, g, p, M, K, G,
                BM, OUT_MODE)


@triton.jit
def _silu_mul_rotate_kernel(GU, PARTNER, COS, SSIN, CS, A, S, RS, M, K, G, stride_m,
                            KROT: tl.constexpr, BM: tl.constexpr, OUT_MODE: tl.constexpr,
                            TRIGGER: tl.constexpr, INTERPRET: tl.constexpr):
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    rmask = rows < M
    cols = tl.arange(0, 128)
    kk = g * 128 + cols
    at = GU + rows[:, None] * stride_m + kk[None, :]
    gate = tl.load(at, mask=rmask[:, None], other=0.0).to(tl.float32)
    up = tl.load(at + K, mask=rmask[:, None], other=0.0).to(tl.float32)
    x = _silu_mul(gate, up, GU.dtype.element_ty, INTERPRET)
    p = tl.program_id(2)
    store_group(givens(x, PARTNER, COS, SSIN, CS, p, K, kk, KROT, BM), A, S, RS, rows, cols, rmask, g, p, M, K, G,
                BM, OUT_MODE)


@triton.jit
def _add_norm_kernel(X, R, W, Y, RO, K, eps, stride_xm, stride_rm, HAS_RES: tl.constexpr, CHUNK: tl.constexpr):
    # the unfused norm, one program per row (above the fused band): the sum of squares, then the rows
    row = tl.program_id(0)
    r = row_rinv(X, R, row, stride_xm, stride_rm, K, eps, HAS_RES, CHUNK)
    for c0 in range(0, K, CHUNK):
        c = c0 + tl.arange(0, CHUNK)
        z = tl.load(X + row * stride_xm + c, mask=c < K, other=0.0).to(tl.float32)
        if HAS_RES:
            z += tl.load(R + row * stride_rm + c, mask=c < K, other=0.0).to(tl.float32)
            tl.store(RO + row * K + c, z.to(RO.dtype.element_ty), mask=c < K)
        y = _normed(z, r, tl.load(W + c, mask=c < K, other=0.0), Y.dtype.element_ty)
        tl.store(Y + row * K + c, y.to(Y.dtype.element_ty), mask=c < K)


@triton.jit
def _silu_mul_kernel(GU, Y, K, stride_m, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    # the unfused silu(gate) * up, a block of one row per program
    row = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    gate = tl.load(GU + row * stride_m + c, mask=c < K, other=0.0).to(tl.float32)
    up = tl.load(GU + row * stride_m + K + c, mask=c < K, other=0.0).to(tl.float32)
    tl.store(Y + row * K + c, _silu_mul(gate, up, GU.dtype.element_ty, INTERPRET).to(Y.dtype.element_ty), mask=c < K)


def add_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    """(normalized x, residual out or None): reference.add_rms_norm's numbers in one kernel."""
    m, k = x.shape
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    ro = torch.empty_like(y) if residual is not None else None
    if m:
        _add_norm_kernel[(m,)](x, residual if residual is not None else x, weight, y, ro if ro is not None else y, k,
                               eps, x.stride(0), residual.stride(0) if residual is not None else 0,
                               HAS_RES=residual is not None, CHUNK=min(4096, triton.next_power_of_2(k)), num_warps=8)
    return y, ro


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gu = [gate | up]: reference.silu_mul's numbers in one kernel."""
    m, k2 = gu.shape
    k = k2 // 2
    y = torch.empty(m, k, dtype=gu.dtype, device=gu.device)
    if m:
        _silu_mul_kernel[(m, triton.cdiv(k, 1024))](gu, y, k, gu.stride(0), BLOCK=1024, INTERPRET=INTERPRET,
                                                     num_warps=4)
    return y


def _check(what: str, x: torch.Tensor, k: int, tables: RotTables) -> None:
    if x.dim() != 2 or x.shape[1] != k or x.stride(1) != 1:
        raise ValueError(f"{what}: expected a row-major [M, {k}] input, got {list(x.shape)} strides {x.stride()}")
    if tables.k != (k if what == "add_norm_rotate" else k // 2):
        raise ValueError(f"{what}: the rotation is for K={tables.k}, the input has {x.shape[1]} columns")
    if x.shape[0] > PRODUCER_MAX_M:
        raise ValueError(f"{what}: {x.shape[0]} rows; the fused producers take at most {PRODUCER_MAX_M} "
                         "(larger batches run the unfused ops)")


def add_norm_rotate(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                    tables: RotTables, mode: int, trigger: bool = False):
    """x, residual [M, K] -> ((A, S, RS) as paro_rotate.rotate(normalized x, tables, mode) returns
    them, residual out [M, K] or None)."""
    m, k = x.shape
    _check("add_norm_rotate", x, k, tables)
    if residual is not None and (residual.shape != x.shape or residual.stride(1) != 1):
        raise ValueError(f"add_norm_rotate: residual {list(residual.shape)} does not match x {list(x.shape)}")
    a, s, rs = outputs(m, tables, mode, x.device)
    ro = torch.empty_like(x) if residual is not None else None
    bm, warps = prologue_tile(m)
    _add_norm_rotate_kernel[(k // GROUP, triton.cdiv(m, bm), tables.parts)](
        x, residual if residual is not None else x, weight, ro if ro is not None else x, tables.partner, tables.cos,
        tables.ssin, tables.cs, a, s, rs, m, k, k // GROUP, eps, x.stride(0),
        residual.stride(0) if residual is not None else 0, KROT=tables.krot, BM=bm, OUT_MODE=mode,
        HAS_RES=residual is not None, TRIGGER=trigger, CHUNK=ROW_CHUNK // bm, num_warps=warps)
    return returned(mode, a, s, rs), ro


def silu_mul_rotate(gu: torch.Tensor, tables: RotTables, mode: int, trigger: bool = False):
    """gu [M, 2K] = [gate | up] -> (A, S, RS) as paro_rotate.rotate(silu(gate) * up, tables, mode)."""
    m, k2 = gu.shape
    _check("silu_mul_rotate", gu, k2, tables)
    k = k2 // 2
    a, s, rs = outputs(m, tables, mode, gu.device)
    bm, warps = prologue_tile(m)
    _silu_mul_rotate_kernel[(k // GROUP, triton.cdiv(m, bm), tables.parts)](
        gu, tables.partner, tables.cos, tables.ssin, tables.cs, a, s, rs, m, k, k // GROUP, gu.stride(0),
        KROT=tables.krot, BM=bm, OUT_MODE=mode, TRIGGER=trigger, INTERPRET=INTERPRET,
        num_warps=warps)
    return returned(mode, a, s, rs)
