"""Gluon helpers the pq2 tensor-core kernels share: a weight word's 2-bit code planes as int8
operands, straight in registers; and the prefill kernels' offsets, activation ring fill and
output store.

The trick: each byte of a weight word holds four 2-bit codes (bits 2s); masking plane s out of all
four bytes at once, `(w >> 2s) & 0x03030303`, gives four int8 codes that are already one register of
an int8 MMA operand, so unpacking costs one shift and one AND per plane.
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from radiance.kernels.triton.gluon_compat import copy_to_shared

from radiance.kernels.triton.pq2_common import block_row


@gluon.constexpr_function
def _plane_asm(s):
    # (b >> 2s) & 3 per byte of $1
    if not s:
        return "and.b32 $0, $1, 0x03030303;"
    return f"{{ .reg .b32 t; shr.b32 t, $1, {2 * s}; and.b32 $0, t, 0x03030303; }}"


@gluon.jit
def code_plane(x4, s: gl.constexpr):
    # plane s of a weight word, (b >> 2s) & 3 per byte, as four int8 codes in one register; x4
    # repeats each word four times (one asm instance per word: pack=4 reads four 32-bit inputs
    # and writes one register of four bytes)
    return gl.inline_asm_elementwise(_plane_asm(s), "=r,r,r,r,r", [x4], dtype=gl.int8, is_pure=True, pack=4)


@gluon.jit
def word_bytes(x4):
    # the four bytes of a word as int8 elements (x4 as in code_plane): register renaming
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r,r,r,r", [x4], dtype=gl.int8, is_pure=True, pack=4)


@gluon.jit
def four_copies(x):
    # each int32 word four times along a new innermost axis: [..., n] -> [..., n, 2, 2]. The
    # operands are carried between loop steps as words: int8 tensors would be carried byte by
    # byte (ptxas then spends 6 PRMT per register unpacking and repacking them)
    return gl.join(gl.join(x, x), gl.join(x, x))


@gluon.jit
def ring_offsets(M, N, K, G, BN: gl.constexpr, BT: gl.constexpr, W_L: gl.constexpr, LN: gl.constexpr,
                 C_L: gl.constexpr, S_L: gl.constexpr, QW: gl.constexpr):
    # this program's first token / row and the offsets its loads and copies start from; QW = 4: the
    # activations as int32 words (32 per group), 1: as bytes (128 per group). Indices are clamped into
    # the tensors instead of masked (rows past N / tokens past M are never stored); tokens past M wrap
    # around instead of all reading token M - 1 (one address copied by most of a tile's threads).
    t0 = gl.program_id(0) * BT
    n0 = gl.program_id(1) * BN
    rw = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, W_L)), N - 1)
    w_off = block_row(rw, G, 8)[:, None] + gl.arange(0, 8, layout=gl.SliceLayout(0, W_L))[None, :]
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=LN), N - 1)
    c_tok = (t0 + gl.arange(0, BT, layout=gl.SliceLayout(1, C_L))) % M
    q_off = c_tok[:, None] * (K // QW) + gl.arange(0, 128 // QW, layout=gl.SliceLayout(0, C_L))[None, :]
    s_tok = (t0 + gl.arange(0, BT, layout=S_L)) % M
    return t0, n0, w_off, rn, q_off, s_tok


@gluon.jit
def ring_fill(ring, sbuf, tbuf, Q, S, T, q_off, s_tok, g, G, QW: gl.constexpr):
    # cp.async of group g's activations, scales and group sums into one ring stage (the group
    # clamped: a stage past the range is filled and never read)
    gc = gl.minimum(g, G - 1)
    copy_to_shared(ring, Q + gc * (128 // QW) + q_off)
    copy_to_shared(sbuf, S + s_tok * G + gc)
    copy_to_shared(tbuf, T + s_tok * G + gc)
    async_copy.commit_group()


@gluon.jit
def store_tile(acc, Y, t0, n0, M, N, BN: gl.constexpr, BT: gl.constexpr, LN: gl.constexpr, LT: gl.constexpr):
    # acc [BN rows, BT tokens] into Y [M, N]
    cols = n0 + gl.arange(0, BN, layout=LN)
    toks = t0 + gl.arange(0, BT, layout=LT)
    ymask = (cols < N)[:, None] & (toks < M)[None, :]
    gl.store(Y + toks[None, :] * N + cols[:, None], acc.to(Y.dtype.element_ty), mask=ymask)
