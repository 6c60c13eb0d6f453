"""Gluon helpers the pq2 tensor-core kernels share: a weight word's 2-bit code planes as int8
operands, straight in registers.

The trick: each byte of a weight word holds four 2-bit codes (bits 2s); masking plane s out of all
four bytes at once, `(w >> 2s) & 0x03030303`, gives four int8 codes that are already one register of
an int8 MMA operand, so unpacking costs one shift and one AND per plane.
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl


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
