"""MXFP4-PARO GEMM over paroquant's rotation prologue: W4A16 (fp16 activations) and W4A8 (fp8 e4m3
activations with a per (row, 128-group) scale), the e2m1 weights dequantized in registers, fp32
accumulation (issue #38).

Weight layout (built once by `repack` from the checkpoint's [N, K/2] bytes): WB[C, N, 32] u8, C =
K/64 chunks; byte t of (chunk c, column n) holds the e2m1 code of k = 64c + t in its low nibble
and of k = 64c + 32 + t in its high nibble. So a chunk of one column is 32 contiguous bytes, each
nibble plane is one whole 32-wide e8m0 block (its scale is one value per column, broadcast), and a
chunk is two K = 32 dots on contiguous activation slices -- no register interleave. EX[C*2, N] u8
holds one byte per (block, column), what the kernel turns into that block's multiplier (below);
RSC[N] fp32 the column's power of two applied once in the epilogue.

Where the e8m0 scale 2^(e-127) goes: folded into the dequantized operand, relative to a per-column
reference exponent r (RSC = 2^(r-127), normal); per-block partial dots scaled in fp32 only for
layers where some block falls outside the fold's exact window (`PER_BLOCK`):

- W4A16 fold: an e2m1 code's bits placed in an fp16 (sign -> bit 15, magnitude -> bits 9..11) are
  its value times 2^-14 exactly (e2m1's subnormal 0.5 lands on fp16's subnormal 2^-15); one fp16
  multiply by 2^(e - r + 14) (EX = its fp16 exponent field e - r + 29) makes value * 2^(e - r).
  With r = (largest exponent of the column's nonzero blocks) - 1 the operand is at most 12 (no
  overflow) and exact down to e - r = -23 (0.5 * 2^-23 = 2^-24, fp16's least subnormal): every
  nonzero block within 24 binades of its column's largest is exact. EX = 0 (multiplier 0) marks an
  all-zero block.
- W4A8 fold: fp8 e4m3 holds value * 2^(e - r) exactly for e - r in [-8, 6]; r = largest - 6, a
  14-binade window. The operand is (bits * 2^14) * 2^(e - r) in fp16 (EX = e - r + 15), then
  converted to e4m3 (exact). The per-group activation scale multiplies each chunk's K = 64 partial
  (both halves sit in one 128-group).
- PER_BLOCK: the operand is the e2m1 value itself (exact in fp16 and e4m3); each K = 32 partial dot
  is scaled by 2^(e - 127) in fp32 (EX = e), RSC = 1. Exact for every e8m0 byte (0..254), at one
  fp32 FMA per output per block -- `repack` picks it only when the fold's window does not hold.

Dot orientation: kind "deqt" (decode) puts the weights on the MMA's M side and x rows on its N side
(M = 1 pads to 16 rows, not 64; on sm_90 the dequantized operand stays in registers as wgmma's A),
kind "deq" (prefill) x rows on M, weights on N. Merged linears (P <= 3 rotated copies of the
activations): columns [pb1, pb2) read copy 1, [pb2, N) copy 2, chosen per n-block -- boundaries
must be multiples of BN. Split-K (decode, and prefill tiles that leave the GPU short):
split_finish.finish_tile's ticket reduction, its fp32 partials and self-resetting counters allocated
once at prepare.

Activations: W4A16 reads paro_rotate's PLAIN mode (the rotated activations in fp16, unscaled: as
paroquant's deq/deqt kinds, |rotated activation| must stay below 65504); W4A8 reads `quant_fp8`'s
output (e4m3 per (row, 128-group), reference.quant_fp8_e4m3_group's numerics) made from the
prologue's fp32 ROT32 mode. fp8 dots need sm_89+.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance.kernels.formats.paroquant_mxfp4 import BLOCK, E8M0_BIAS, E8M0_NAN, unpack_e2m1
from radiance.kernels.triton import interpreting
from radiance.kernels.triton.split_finish import finish_tile

INTERPRET = interpreting()  # the CPU interpreter cannot run inline PTX: the dequant's spelled-out path

CHUNK = 64  # k per loop step: two e8m0 blocks, one per nibble plane
GROUP = 128  # the rotation group (the fp8 activation scale's group)
W4A16_WINDOW = 23  # e - r down to -23 is exact in the fp16 operand
W4A16_TOP = 1  # r = largest - 1: the operand reaches 6 * 2 = 12
W4A8_WINDOW = 8  # e4m3 holds value * 2^d exactly for d in [-8, 6]
W4A8_TOP = 6


def repack(weight: torch.Tensor, weight_scale: torch.Tensor, fp8: bool = False, per_block: bool | None = None):
    """Checkpoint tensors (concatenated along N) -> (WB [K/64, N, 32] u8, EX [K/32, N] u8, RSC [N]
    fp32, per_block). per_block None: the fold wherever it is exact (module docstring), else the
    per-block scaling; True / False force one (False where the fold is not exact is an error)."""
    if weight.dim() != 2 or weight_scale.dim() != 2 or weight.dtype != torch.uint8 or weight_scale.dtype != torch.uint8:
        raise ValueError(f"mxfp4: weight [N, K/2] and weight_scale [N, K/32] must be 2-D uint8, got "
                         f"{list(weight.shape)} {weight.dtype} and {list(weight_scale.shape)} {weight_scale.dtype}")
    n, k = int(weight.shape[0]), int(weight.shape[1]) * 2
    if k % GROUP or tuple(weight_scale.shape) != (n, k // BLOCK):
        raise ValueError(f"mxfp4: K={k} must be a multiple of {GROUP} and weight_scale [N, K/32] = [{n}, {k // BLOCK}], "
                         f"got {list(weight_scale.shape)}")
    if bool((weight_scale == E8M0_NAN).any()):
        raise ValueError("mxfp4: weight_scale holds the e8m0 NaN (255)")
    codes = unpack_e2m1(weight).view(n, k // CHUNK, 2, 32)  # [N, C, plane, t]
    wb = (codes[:, :, 0] | (codes[:, :, 1] << 4)).permute(1, 0, 2).contiguous()  # [C, N, 32]
    e = weight_scale.to(torch.int32)  # [N, K/32]
    live = (codes.view(n, k // BLOCK, BLOCK) & 7).amax(-1) > 0  # blocks with a nonzero value
    top = torch.where(live, e, torch.full_like(e, -1)).amax(-1)  # [N]; -1: an all-zero column
    window, head = (W4A8_WINDOW, W4A8_TOP) if fp8 else (W4A16_WINDOW, W4A16_TOP)
    r = (top - head).clamp(min=1)  # 2^(r - 127) normal
    d = e - r[:, None]
    exact = bool((d[live] >= -window).all())
    if per_block is None:
        per_block = not exact
    if not per_block and not exact:
        raise ValueError(f"mxfp4: a column's nonzero e8m0 blocks span more than the fold's {window + head} "
                         "binades; it needs the per-block scaling")
    if per_block:
        ex, rsc = e, torch.ones(n, dtype=torch.float32, device=weight.device)
    else:
        field = d + (15 if fp8 else 29)  # the multiplier's fp16 exponent field: 2^d (W4A8), 2^(d + 14) (W4A16)
        ex = torch.where(live, field, torch.zeros_like(field))
        rsc = torch.exp2((r - E8M0_BIAS).to(torch.float64)).to(torch.float32)
    return wb, ex.to(torch.uint8).t().contiguous(), rsc, per_block


@triton.jit
def _e2m1_bits(c):
    # codes (uint8, 0..15) -> fp16 whose value is the e2m1 value times 2^-14, exactly: sign bit 3
    # to bit 15, the 3 magnitude bits (exponent 2, mantissa 1) to fp16 bits 9..11
    c = c.to(tl.int16)
    return (((c & 7) << 9) | ((c & 8) << 12)).to(tl.float16, bitcast=True)


@triton.jit
def _pow2_f16(ex):
    # an fp16 power of two from its exponent field (0 -> 0)
    return (ex.to(tl.int16) << 10).to(tl.float16, bitcast=True)


@triton.jit
def _planes_f16(w, m_lo, m_hi, ASM: tl.constexpr):
    # weight bytes -> (low, high) nibble planes as fp16 e2m1 value * 2^-14 (_e2m1_bits) times the
    # fp16 multipliers m_lo / m_hi (broadcast like w). ASM: four bytes per 32-bit register; prmt puts
    # byte i at bits 8..15 of a 16-bit half, where the high nibble's sign is the fp16 sign bit and its
    # magnitude, shifted right by 3, lands on bits 9..11 (and, shr, lop3: 1.5 instructions per
    # weight), the low nibble the same after a shift left by 4; mul.rn.f16x2 then applies two
    # multipliers per instruction (the compiler's per-byte unpack took several instructions per
    # weight, and the integer pipe bounded the decode GEMM on the H200)
    if ASM:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 z, a, b, x, y;\n"
            " mov.b32 z, 0; prmt.b32 a, $4, z, 0x1404; prmt.b32 b, $4, z, 0x3424;\n"
            " and.b32 x, a, 0x70007000; shr.b32 x, x, 3; lop3.b32 x, a, 0x80008000, x, 0xEA; mul.rn.f16x2 $2, x, $7;\n"
            " and.b32 y, b, 0x70007000; shr.b32 y, y, 3; lop3.b32 y, b, 0x80008000, y, 0xEA; mul.rn.f16x2 $3, y, $8;\n"
            " shl.b32 a, a, 4; shl.b32 b, b, 4;\n"
            " and.b32 x, a, 0x70007000; shr.b32 x, x, 3; lop3.b32 x, a, 0x80008000, x, 0xEA; mul.rn.f16x2 $0, x, $5;\n"
            " and.b32 y, b, 0x70007000; shr.b32 y, y, 3; lop3.b32 y, b, 0x80008000, y, 0xEA; mul.rn.f16x2 $1, y, $6; }",
            constraints="=r,=r,=r,=r,r,r,r,r,r", args=[w, m_lo, m_hi], dtype=(tl.float16, tl.float16),
            is_pure=True, pack=4)
    else:
        return _e2m1_bits(w & 15) * m_lo, _e2m1_bits(w >> 4) * m_hi


@triton.jit
def _operands(w, e_lo, e_hi, PER_BLOCK: tl.constexpr, A_FP8: tl.constexpr, ASM: tl.constexpr):
    # a chunk's weight bytes -> its two nibble planes times their block multipliers (e_lo / e_hi
    # broadcast like w), in the dot's input type. The e8m0 scale is folded into the dequantized
    # operand relative to the column's reference exponent (exact in its 24-binade fp16 / 14-binade
    # e4m3 window; RSC restores 2^(r - 127) in fp32), or, where a layer leaves that window, applied
    # in fp32 to each K = 32 partial dot (PER_BLOCK) -- nothing overflows or flushes either way
    if PER_BLOCK or A_FP8:  # the e2m1 value itself
        one = tl.full(w.shape, 16384.0, tl.float16)
        lo, hi = _planes_f16(w, one, one, ASM)
        if not PER_BLOCK:  # W4A8 fold: times 2^(e - r), exact in fp16 and then in e4m3
            lo = lo * _pow2_f16(e_lo)
            hi = hi * _pow2_f16(e_hi)
    else:
        lo, hi = _planes_f16(w, tl.broadcast_to(_pow2_f16(e_lo), w.shape), tl.broadcast_to(_pow2_f16(e_hi), w.shape),
                             ASM)
    if A_FP8:
        lo = lo.to(tl.float8e4nv)
        hi = hi.to(tl.float8e4nv)
    return lo, hi


@triton.jit
def _e8m0_f32(e):
    # 2^(e - 127) in fp32 for an e8m0 byte (0 -> the subnormal 2^-127)
    e = e.to(tl.int32)
    return tl.where(e == 0, 5.877471754111438e-39, (e << 23).to(tl.float32, bitcast=True))


@triton.jit
def _along_n(v, TRANS: tl.constexpr):
    # a per-column vector broadcast over the accumulator (columns on axis 0 when TRANS)
    if TRANS:
        return v[:, None]
    else:
        return v[None, :]


@triton.jit
def _along_m(v, TRANS: tl.constexpr):
    if TRANS:
        return v[None, :]
    else:
        return v[:, None]


@triton.jit
def _mxfp4_kernel(A, S, WB, EX, RSC, Y, BIAS, PART, CNT, M, N, K, C, pb1, pb2, cps, SPLIT,
                  BM: tl.constexpr, BN: tl.constexpr, TRANS: tl.constexpr, PER_BLOCK: tl.constexpr,
                  A_FP8: tl.constexpr, NS: tl.constexpr, HAS_BIAS: tl.constexpr, ASM: tl.constexpr):
    # y[m, n] = RSC[n] * sum over chunks of dot(a, w) (module docstring). grid (m-blocks, n-blocks,
    # split); program z takes chunks z*cps .. (z+1)*cps - 1
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    n0 = pid_n * BN
    prt = (n0 >= pb1).to(tl.int32) + (n0 >= pb2).to(tl.int32)  # the rotated copy this n-block reads
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    offs_t = tl.arange(0, 32)
    mmask = offs_m < M
    nmask = offs_n < N
    c0 = pid_k * cps
    c1 = tl.minimum(c0 + cps, C)
    a_row = A + prt * M * K + offs_m * K
    s_row = S + prt * M * (K // 128) + offs_m * (K // 128)
    if TRANS:  # weights [BN, 32] the MMA's M side, activations [32, BM] its N side
        a_base = a_row[None, :] + offs_t[:, None]
        a_mask = mmask[None, :]
        w_base = WB + offs_n[:, None] * 32 + offs_t[None, :]
        w_mask = nmask[:, None]
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:  # activations [BM, 32] the M side, weights [32, BN] its N side
        a_base = a_row[:, None] + offs_t[None, :]
        a_mask = mmask[:, None]
        w_base = WB + offs_n[None, :] * 32 + offs_t[:, None]
        w_mask = nmask[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for c in tl.range(c0, c1, num_stages=NS):
        w = tl.load(w_base + c * N * 32, mask=w_mask, other=0)
        a_lo = tl.load(a_base + c * 64, mask=a_mask, other=0.0)
        a_hi = tl.load(a_base + c * 64 + 32, mask=a_mask, other=0.0)
        e_lo = tl.load(EX + (2 * c) * N + offs_n, mask=nmask, other=0)
        e_hi = tl.load(EX + (2 * c + 1) * N + offs_n, mask=nmask, other=0)
        lo, hi = _operands(w, _along_n(e_lo, TRANS), _along_n(e_hi, TRANS), PER_BLOCK, A_FP8, ASM)
        if PER_BLOCK:  # each K = 32 partial times its block's 2^(e - 127) (and the fp8 group scale)
            s_lo = _along_n(_e8m0_f32(e_lo), TRANS)
            s_hi = _along_n(_e8m0_f32(e_hi), TRANS)
            if A_FP8:
                sa = _along_m(tl.load(s_row + c // 2, mask=mmask, other=0.0), TRANS)
                s_lo = s_lo * sa
                s_hi = s_hi * sa
            if TRANS:
                acc = tl.fma(tl.dot(lo, a_lo), s_lo, acc)
                acc = tl.fma(tl.dot(hi, a_hi), s_hi, acc)
            else:
                acc = tl.fma(tl.dot(a_lo, lo), s_lo, acc)
                acc = tl.fma(tl.dot(a_hi, hi), s_hi, acc)
        elif A_FP8:  # the chunk's K = 64 partial times its 128-group activation scale
            sa = _along_m(tl.load(s_row + c // 2, mask=mmask, other=0.0), TRANS)
            if TRANS:
                acc = tl.fma(tl.dot(hi, a_hi, tl.dot(lo, a_lo)), sa, acc)
            else:
                acc = tl.fma(tl.dot(a_hi, hi, tl.dot(a_lo, lo)), sa, acc)
        else:
            if TRANS:
                acc = tl.dot(lo, a_lo, acc)
                acc = tl.dot(hi, a_hi, acc)
            else:
                acc = tl.dot(a_lo, lo, acc)
                acc = tl.dot(a_hi, hi, acc)
    acc = acc * _along_n(tl.load(RSC + offs_n, mask=nmask, other=0.0), TRANS)
    if TRANS:
        acc = tl.trans(acc)
    finish_tile(acc, Y, BIAS, PART, CNT, offs_m, offs_n, mmask, nmask, M, N, SPLIT, pid_k,
                pid_n * tl.num_programs(0) + pid_m, HAS_BIAS)


@triton.jit
def _quant_fp8_kernel(X, Q, S, M, K, G, BM: tl.constexpr):
    # fp32 rotated activations [P, M, K] -> e4m3 codes and fp32 scales per (row, 128-group):
    # S = div_rn(amax, 448), q = e4m3(clamp(div_rn(x, S), +-448)) round-to-nearest-even, the
    # rounding spelled out in fp32 (the same bits under the interpreter, whose fp8 cast does not
    # round to nearest even): normals keep 3 mantissa bits (add half an ulp, ties to even, mask),
    # subnormals (|v| < 2^-6) round to a multiple of 2^-9 by the 1.5 * 2^14 add-and-subtract
    g = tl.program_id(0)
    p = tl.program_id(2)
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    cols = tl.arange(0, 128)
    rmask = rows < M
    off = p * M * K + rows[:, None] * K + g * 128 + cols[None, :]
    x = tl.load(X + off, mask=rmask[:, None], other=0.0)
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32))
    safe = tl.where(scale > 0, scale, 1.0)
    v = tl.math.div_rn(x, tl.broadcast_to(safe[:, None], (BM, 128)))
    v = tl.minimum(tl.maximum(v, -448.0), 448.0)
    b = v.to(tl.int32, bitcast=True)
    normal = ((b + 0x7FFFF + ((b >> 20) & 1)) & -1048576).to(tl.float32, bitcast=True)
    sub = (v + 24576.0) - 24576.0
    q = tl.where(tl.abs(v) < 0.015625, sub, normal)
    tl.store(Q + off, q.to(tl.float8e4nv), mask=rmask[:, None])
    tl.store(S + p * M * G + rows * G + g, scale, mask=rmask)


def quant_fp8(a32: torch.Tensor, q: torch.Tensor | None = None, s: torch.Tensor | None = None, bm: int = 4):
    """Rotated fp32 activations [P, M, K] (paro_rotate's ROT32) -> (e4m3 [P, M, K], scales fp32 [P, M, K/128])."""
    parts, m, k = a32.shape
    g = k // GROUP
    q = torch.empty(parts, m, k, dtype=torch.float8_e4m3fn, device=a32.device) if q is None else q
    s = torch.empty(parts, m, g, dtype=torch.float32, device=a32.device) if s is None else s
    _quant_fp8_kernel[(g, triton.cdiv(m, bm), parts)](a32, q, s, m, k, g, BM=bm, num_warps=4 if bm >= 4 else 2)
    return q, s


def gemm(kind: str, a, s, wb, ex, rsc, y, *, bm: int, bn: int, split: int, pb1: int, pb2: int, per_block: bool,
         part: torch.Tensor, cnt: torch.Tensor, num_warps: int, num_stages: int, bias: torch.Tensor | None = None):
    """y [M, N] (+ bias, added in fp32 before the one rounding) from rotated activations a [P, M, K]
    (fp16 PLAIN, or e4m3 with s [P, M, K/128]) and the `repack`ed weight. kind: "deqt" (weights on
    the MMA's M side: decode) or "deq" (prefill)."""
    if kind not in ("deq", "deqt"):
        raise ValueError(f"mxfp4 GEMM kind {kind!r}: use deq or deqt")
    _, m, k = a.shape
    c, n, _ = wb.shape
    fp8 = a.dtype == torch.float8_e4m3fn
    if a.dtype not in (torch.float16, torch.float8_e4m3fn) or c * CHUNK != k or (fp8 and s is None):
        raise ValueError(f"mxfp4 GEMM: activations [P, M, {c * CHUNK}] fp16 (or e4m3 with their scales), "
                         f"got {list(a.shape)} {a.dtype}")
    cps = triton.cdiv(c, split)
    split = triton.cdiv(c, cps)
    if part is None or cnt is None or part.dtype != torch.float32 or cnt.dtype != torch.int32:
        raise RuntimeError("mxfp4 GEMM needs its fp32 partial and int32 ticket scratch")
    if split > 1 and (part.numel() < split * m * n or cnt.numel() < triton.cdiv(m, bm) * triton.cdiv(n, bn)):
        raise RuntimeError(f"mxfp4 split-K scratch too small for split={split} M={m} N={n}; "
                           "reserve it at prepare (radiance.kernels.nvidia.pool.reserve), before graph capture")
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), split)
    _mxfp4_kernel[grid](a, part if s is None else s, wb, ex, rsc, y, part if bias is None else bias, part, cnt,
                        m, n, k, c, pb1, pb2, cps, split, BM=bm, BN=bn, TRANS=kind == "deqt", PER_BLOCK=per_block,
                        A_FP8=fp8, NS=num_stages, HAS_BIAS=bias is not None, ASM=not INTERPRET,
                        num_warps=num_warps, num_stages=num_stages)
    return y
