"""Pieces every pq2 kernel shares, so that the float epilogue is one expression everywhere
(the `exact` kernel set relies on kernels doing the same fp32 operations in the same order)."""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.small_int import small_int_f32


ROW_BLOCK = tl.constexpr(128)  # rows per block of the prepared weights


@triton.jit
def block_row(n, groups, RW: tl.constexpr):
    # where row n starts in the prepared weights [N/128, G, 128, 32 bytes] (pq2_ops.prepare:
    # blocks of 128 rows, groups major within a block), in elements of RW per group record
    # (32 bytes or 8 words); group g of the row is group_off(g, RW) further. A load of one group for
    # consecutive rows is one contiguous run. Row-major (each row's records K/4 bytes apart),
    # the int8-MMA kernels ran 2-20 % slower; the DP4A GEMV kept its speed once its tile put a
    # warp's 32 lanes on 16 rows of one group.
    return (n // ROW_BLOCK) * (groups * (ROW_BLOCK * RW)) + (n % ROW_BLOCK) * RW


@triton.jit
def group_off(g, RW: tl.constexpr):
    # group g past block_row's row start: one group step of a block is ROW_BLOCK records
    return g * (ROW_BLOCK * RW)


@triton.jit
def group_acc(acc, idot, t, sa, sw):
    # acc += ((int dot - t) * activation scale) * weight scale, one 128-group at a time, in group
    # order; t is the ternary -1's group sum of q (0 where the codes are already -1/0/1)
    return acc + (small_int_f32(idot, t) * sa) * sw


@triton.jit
def dp4a(a, b, c, ASM: tl.constexpr):
    # c + sum_i byte_i(a) * byte_i(b), bytes signed. ASM: the PTX instruction (sm_61+); else the
    # same integer function spelled out (the CPU interpreter cannot run inline PTX).
    if ASM:
        return tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", constraints="=r,r,r,r",
                                         args=[a, b, c], dtype=tl.int32, is_pure=True, pack=1)
    else:
        r = c
        for i in tl.static_range(4):
            r += ((a << (24 - 8 * i)) >> 24) * ((b << (24 - 8 * i)) >> 24)
        return r


@triton.jit
def plane(wb, s: tl.constexpr, ASM: tl.constexpr):
    # plane s of weight bytes: (b >> 2s) & 3 per byte, as int8 (codes 0/1/2). ASM: four bytes per
    # 32-bit register (pack=4), two instructions per word; unpacking bytes costs ~8x more.
    if ASM:
        if s == 0:
            return tl.inline_asm_elementwise("and.b32 $0, $1, 0x03030303;", constraints="=r,r",
                                             args=[wb], dtype=tl.int8, is_pure=True, pack=4)
        elif s == 1:
            return tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 2; and.b32 $0, t, 0x03030303; }",
                                             constraints="=r,r", args=[wb], dtype=tl.int8, is_pure=True, pack=4)
        elif s == 2:
            return tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 4; and.b32 $0, t, 0x03030303; }",
                                             constraints="=r,r", args=[wb], dtype=tl.int8, is_pure=True, pack=4)
        else:
            return tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 6; and.b32 $0, t, 0x03030303; }",
                                             constraints="=r,r", args=[wb], dtype=tl.int8, is_pure=True, pack=4)
    else:
        return ((wb.to(tl.int32) >> (2 * s)) & 3).to(tl.int8)


@triton.jit(do_not_specialize=["MN"])
def reduce_splits(P, Y, MN, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    # fixed-order sum of the split-K partials P[SPLITS, MN] (fp32), rounded once into Y's dtype
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(P + offs, mask=mask, other=0.0)
    for z in tl.static_range(1, SPLITS):
        acc += tl.load(P + z * MN + offs, mask=mask, other=0.0)
    tl.store(Y + offs, acc.to(Y.dtype.element_ty), mask=mask)
