"""paroquant on NVIDIA as data: which GEMM kind serves which rows of a layer on which GPU (the
registry `KERNELS`, in priority order; kernels/registry.py chooses at prepare), each kind's tile,
the tiles' shared-memory fit, and the format knobs. Unit-tested on CPU with faked capabilities;
docs/nvidia.md has the resulting band -> kernel table per card.

GEMM kinds (triton/paro_gemm.py, the Gluon ones in triton/paro_*gluon*.py / paro_wgmma.py):
`mma_gl` (mma.sync, the weights unpacked into fragment registers, a cp.async ring), `gemv_gl` /
`gemv` (CUDA cores, Gluon / plain Triton), `deqt` (W4A16: weights dequantized in registers as
the MMA's A operand, x rows its N side), `deq` (the same with the weights as the B operand,
staged in shared memory; W4A8 reads per-group int8 and folds the zero point per group), `fold`
(W4A8 prefill: transposed MMA on (c - 8), activations scaled per (row, group)), `wgmma` (sm_90:
fp16 wgmma, the weights dequantized into its register operand) and `scratch` (the weight
dequantized to an fp16 scratch, then cuBLAS). W4A8 needs int8 tensor-core dots (sm_80+).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import triton

from radiance.kernels.config import KernelConfig, needs_card
from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.registry import ROWS_MAX, KernelSpec, Target, register
from radiance.kernels.triton import paro_rotate
from radiance.kernels.triton.split_finish import stream_programs

W4A16_ONLY = ("deqt", "gemv", "gemv_gl", "mma_gl", "wgmma", "scratch")  # kinds that multiply fp16/fp32 activations only
GEMV_MAX_M = 1  # W4A16 rows up to this run the Triton CUDA-core gemv (one program per row)
GEMV_GL_MAX_M = 2  # ... and up to this the Gluon one (all rows in one program), where mma_gl does not take them:
MMA_GL_MAX_M = 16  # W4A16 rows 1..this on sm_80+: the Gluon tensor-core kind (8 tokens per program, 16 above 8)
# BN-64 decode programs that split-K leaves with this few groups run one m16 row tile per warp on
# 4 warps instead of two on 2: on the H200 faster on out (6 groups per program) at M = 1..8, while
# qkv at 10 groups lost and down at 17 tied
SHORT_SPLIT_GROUPS = 8
# 8-token mma_gl tiles launched dependent on their prologue (kernels/pdl.py, sm_90+) up to this
# split: on the H200 it saves a few % on gate_up (split 2) and qkv (split 4) at M = 1..8, while
# down and out (split 8) and qkv's 16-token tile (split 2, 3 stages, M = 9..16) are slower with it
PDL_MAX_SPLIT = 4
# its 16-token tile on a stream-K grid takes 165 registers (offline SASS, sm_90): 3 programs of 4 warps per SM
STREAM_PER_SM_16 = 3
# Below Ampere Triton 3.6 lowers tl.dot to FMA (no tensor cores; offline SASS for sm_75: the deq /
# deqt / fold tiles spill 300-3700 bytes per thread), so Turing keeps every decode row on the Gluon
# GEMV (4 rows per program, no spills) up to this M, and above it dequantizes to the scratch for
# cuBLAS as its prefill does. 8 = two row blocks, each re-reading the weights: estimated from an
# RTX 2060's bandwidth and FMA rate against the scratch path's 5x weight traffic, not measured.
TURING_GEMV_MAX_M = 8
# sm_90 W4A16 prefill rows up to this run the fused wgmma kind on layers at least this wide, the
# scratch + cuBLAS path above: on the H200 at M = 128 / 256 the fused kernel beats the scratch path
# on gate_up and qkv by 1.3-1.8x (the scratch path's dequant of the whole weight does not shrink
# with M); down and out (N = 5120: too few programs without split-K) and every shape from M = 512
# on except gate_up are faster on the scratch path
WGMMA_MAX_M = 256
WGMMA_MIN_N = 8192
WGMMA_BT128_MAX_M = 128  # prefill rows up to this take the 128-token wgmma tile, 256 tokens above
SMEM_LIMIT = {(7, 5): 64 * 1024, (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 9): 99 * 1024, (9, 0): 227 * 1024}


@dataclass(frozen=True)
class Tile:
    bm: int  # rows of x per program
    bn: int  # output columns per program
    warps: int
    stages: int
    split: int = 1
    kind: str = "deq"  # "deq" | "deqt" | "fold" | "gemv" (paro_gemm.KERNELS) | "gemv_gl" (paro_gemv_gluon)
    # | "mma_gl" (paro_mma_gluon; bm = 8 or 16 tokens per program) | "wgmma" (paro_wgmma, sm_90 prefill)
    gpi: int = 1  # K groups per loop iteration (gemv only; divides the layer's group count)
    maxnreg: int = 0  # register cap per thread, 0 = the compiler's choice (Triton kinds and mma_gl; gemv_gl refuses one)
    # mma_gl: a stream-K grid of this many programs per SM, split then the most programs sharing
    # one output tile (stream_tile); 0 = one program per tile and split
    persist: int = 0


def stream_tile(t: Tile, m: int, n: int, groups: int, sms: int, per_sm: int) -> Tile:
    """`t` on a stream-K grid of per_sm programs per SM, its split the partial slots that needs."""
    return replace(t, persist=per_sm, split=stream_programs(per_sm * sms, m, n, t.bm, t.bn, groups)[1])


def prologue_mode(kind: str, i8: bool) -> int:
    """The activation format each GEMM kind reads (paro_rotate's output modes)."""
    if i8:
        return paro_rotate.I8G
    return {"deq": paro_rotate.PLAIN, "deqt": paro_rotate.PLAIN, "fold": paro_rotate.F16G,
            "gemv": paro_rotate.ROT32P, "gemv_gl": paro_rotate.ROT32P,
            "mma_gl": paro_rotate.F16GF, "wgmma": paro_rotate.PLAINW}[kind]


def smem_bytes(t: Tile, act_bytes: int) -> int:
    """Shared memory the GEMM asks for: pipelined weight + activation tiles per stage, plus the
    dequantized weight operand staged once. The Gluon gemv keeps everything in registers (1 KB
    for its final cross-warp sum); mma_gl with stages > 1 adds its ring of weight tiles
    (mma_gl from 3 stages: also the activation words, scales, zero points and token scales / sums)."""
    if t.kind == "gemv_gl" or (t.kind == "mma_gl" and t.stages == 1):
        return 1024
    if t.kind == "mma_gl" and t.stages > 2:
        return 1024 + t.stages * (t.bn * 64 + t.bm * 256 + t.bn * 3 + t.bm * 8)
    if t.kind == "mma_gl":
        return 1024 + t.stages * t.gpi * t.bn * 64
    if t.kind == "wgmma":  # the activation ring only (weights go straight to registers)
        return 1024 + t.stages * t.bm * GROUP_SIZE * 2
    return t.stages * (t.bn * 64 + t.bm * GROUP_SIZE * act_bytes) + t.bn * GROUP_SIZE * act_bytes


def fit_tile(t, limit: int, act_bytes: int = 2, smem=None, min_bn: int = 64, what: str = "paroquant"):
    """Halve stages (to 2), then BM (to 16), then BN (to min_bn) until the tile fits `limit` bytes
    by `smem(tile, act_bytes)` (default: this table's smem_bytes; mxfp4_ops passes its own)."""
    smem = smem or smem_bytes
    while smem(t, act_bytes) > limit:
        if t.stages > 2:
            t = replace(t, stages=t.stages - 1)
        elif t.bm > 16:
            t = replace(t, bm=t.bm // 2)
        elif t.bn > min_bn:
            t = replace(t, bn=t.bn // 2, warps=max(4, t.warps // 2))
        else:
            raise ValueError(f"{what}: no GEMM tile fits {limit} bytes of shared memory")
    return t


def smem_limit(cap: tuple[int, int]) -> int:
    if cap in SMEM_LIMIT:
        return SMEM_LIMIT[cap]
    return SMEM_LIMIT[(9, 0)] if cap >= (9, 0) else SMEM_LIMIT[(8, 6)] if cap >= (8, 0) else SMEM_LIMIT[(7, 5)]


def use_int8(cap: tuple[int, int], config: KernelConfig) -> bool:
    """RADIANCE_PQ_I8: W4A8, on cards with int8 tensor-core dots (an error naming the knob below)."""
    return needs_card("RADIANCE_PQ_I8", config.i8, cap, (8, 0), "int8 tensor-core dots", "W4A16")


def launches_dependent(t: Tile) -> bool:
    """Whether the tile's GEMM launches dependent on its prologue where the GPU can (kernels/pdl.py):
    mma_gl's 8-token tiles on a tiles x split grid with a short split (PDL_MAX_SPLIT)."""
    return t.kind == "mma_gl" and t.bm == 8 and not t.persist and t.split <= PDL_MAX_SPLIT


def decode_tile(kind: str, m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    """The split-K tile of a decode-band kind (mma_gl, gemv_gl, gemv, deqt, deq) for M rows."""
    # Tuned on the H200 (bench/sweep_paro_decode.py).
    # mma_gl: the weights, activations, scales and zero points through a 4-stage cp.async ring (ptxas
    # sinks a register prefetch to the loop's end); two m16 row tiles per warp: BN 128 on 4 warps on
    # the widest layers (the program's activation copy shared by more rows), else BN 64 on 2; split-K
    # to ~8 programs per SM counted in BN-64 blocks (a power of two, <= 8). At M = 2..8 it beats
    # gemv_gl and deqt on every shape; at M = 1 it is ahead of the CUDA-core GEMV on gate_up, down
    # and qkv, ~3 % behind on out.
    # M = 9..16: 16 tokens per program on the same ring (3 stages) beat deqt on gate_up, down and qkv
    # and lose ~3 % on out; split-K to about 5 programs per SM (132-146 registers: 3 to 7 programs
    # fit) -- twice that lost on qkv. On gate_up that grid is 544 programs on 396 slots (1.37 waves),
    # so the BN-128 layers run a stream-K grid of STREAM_PER_SM_16 programs per SM sharing all (tile,
    # group) steps equally; on the BN-64 layers (down, qkv, out) and at M <= 8 stream-K lost or tied
    # (1 program per tile fills the GPU already), so they keep split-K.
    if kind == "mma_gl":
        bn, warps = (128, 4) if n >= 128 * sms else (64, 2)
        if m <= 8:
            want = max(1, min(8, groups // 2, triton.cdiv(8 * sms, triton.cdiv(n, 64))))
            split = 1 << (want.bit_length() - 1)
            if bn == 64 and split > 1 and groups // split <= SHORT_SPLIT_GROUPS:
                warps = 4  # one m16 row tile per warp: twice the warps on the same grid
            return fit_tile(Tile(8, bn, warps, 4, split, "mma_gl"), smem_limit(cap))
        if bn == 128:
            t = fit_tile(Tile(16, bn, warps, 3, 1, "mma_gl"), smem_limit(cap))
            return stream_tile(t, m, n, groups, sms, min(STREAM_PER_SM_16, smem_limit(cap) // smem_bytes(t, 2)))
        want = max(1, min(8, groups // 2, 5 * sms // triton.cdiv(n, bn)))
        return fit_tile(Tile(16, bn, warps, 3, 1 << (want.bit_length() - 1), "mma_gl"), smem_limit(cap))
    # Gluon gemv (gemv_gl): 2 columns x 4 words per thread, 4 warps, everything of the next group
    # prefetched (stages 3), ~12 programs per SM by split-K (2 groups per step lost everywhere); at
    # M = 2 two rows per program share each decoded word, at M = 3, 4 the tensor cores win. Weights
    # 2-4 steps ahead (registers or a cp.async ring) lost or tied on every shape at M = 1, 2.
    # Triton gemv: BN 16, 2 warps, 4 groups per load. W4A16 rows mma_gl does not take, up to M = 64:
    # deqt, BN 64, 4 warps, 3 stages, split-K to ~16 programs per SM (8 at BM 64) -- faster than deq
    # (~1.5x on gate_up at M = 64). W4A8: deq, the same split rule.
    if kind == "gemv_gl":
        bm, per_sm, gpi, cap_split = m if m <= 2 else 4, 12, 1, 8
        # 4 rows x 4 columns per thread would take 251 registers on sm_75 (offline SASS): 2 columns, 128
        bn, warps, stages = (64 if bm == 4 else 128 if m > 1 or n // 64 >= 4 * sms else 64), 4, 3 if m == 1 else 2
    elif kind == "gemv":  # one row per program (any M)
        bm, per_sm, gpi, cap_split = 1, 4, next(x for x in (4, 2, 1) if groups % x == 0), 16
        bn, warps, stages = (16, 2, 1) if n // 16 >= 4 * sms else (16, 2, 2) if groups <= 64 else (64, 4, 3)
    elif kind in ("deqt", "deq"):
        bm = min(64, max(16, triton.next_power_of_2(m)))
        per_sm, gpi, cap_split = 8 if bm == 64 else 16, 1, 4 if bm == 64 else 8
        bn, warps, stages = (64, 4, 4) if i8 else (64, 4, 3)
    else:
        raise ValueError(f"paroquant: {kind!r} is no decode-band kind")
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    split = max(1, min(groups // 2, triton.cdiv(per_sm * sms, tiles), cap_split))
    t = Tile(bm, bn, warps, stages, split, kind, gpi)
    return fit_tile(t, smem_limit(cap)) if cap < (9, 0) else t


def prefill_tile(kind: str, cap: tuple[int, int], m: int = 2048) -> Tile:
    """The tile of a prefill-band kind (wgmma, deq, fold)."""
    # wgmma: on the H200 at M = 2048 on gate_up 256 x 128 beats deq 128 x 256 and deqt; 128-token
    # tiles up to M = WGMMA_BT128_MAX_M. deq (W4A16 off sm_90): 128 x 256 (on the H200 faster than
    # 128 x 128). fold (W4A8): 128 x 64 on 2 stages capped at 168 registers: 3 programs per SM
    # instead of 2, faster than uncapped or on 4 stages. The cap is sm_90's: for sm_86 the same tile
    # compiles to mma.sync with 253 registers, and capped it spills (offline SASS: 168 stack bytes,
    # 73 local loads/stores per group) -- unmeasured there, so the compiler's choice.
    if kind == "wgmma":
        return Tile(128 if m <= WGMMA_BT128_MAX_M else 256, 128, 8, 3, 1, "wgmma")
    if kind == "fold":
        return fit_tile(Tile(128, 64, 4, 2, 1, "fold", maxnreg=168 if cap >= (9, 0) else 0), smem_limit(cap), 1)
    if kind == "deq":
        return fit_tile(Tile(128, 256, 8, 3, 1, "deq"), smem_limit(cap), 2)
    raise ValueError(f"paroquant: {kind!r} is no prefill-band kind")


# ----------------------------------------------------------------------------- the registry
def _w4a16(t: Target) -> str | None:
    return "W4A16 only (RADIANCE_PQ_I8=1 asks for W4A8)" if t.i8 else None


def _w4a8(t: Target) -> str | None:
    return None if t.i8 else "W4A8 only (RADIANCE_PQ_I8=1)"


def _gluon_w4a16(t: Target) -> str | None:
    return "Gluon: not under the Triton interpreter" if t.interpret else _w4a16(t)


def _wgmma(t: Target) -> str | None:
    return "wgmma is sm_90 only" if (t.cap or (0, 0))[0] != 9 else _gluon_w4a16(t)


def _decode(t: Target) -> tuple[int, int]:
    return 1, t.decode_max_m


def _prefill(t: Target) -> tuple[int, int]:
    return t.decode_max_m + 1, ROWS_MAX


def _turing(t: Target) -> bool:
    return (t.cap or (9, 0)) < (8, 0)  # no capability: the interpreter, tiles as on the H200


def _scratch_rows(t: Target) -> tuple[int, int]:
    # below Ampere Triton's dots have no tensor cores: above the Gluon GEMV's rows the scratch path
    # serves decode rows too
    return (min(t.decode_max_m, TURING_GEMV_MAX_M) if _turing(t) else t.decode_max_m) + 1, ROWS_MAX


def _wide_prefill(t: Target) -> tuple[int, int]:
    return (t.decode_max_m + 1, WGMMA_MAX_M) if t.n >= WGMMA_MIN_N else (1, 0)


def _gemv_gl_rows(t: Target) -> tuple[int, int]:
    return 1, TURING_GEMV_MAX_M if _turing(t) else GEMV_GL_MAX_M


def _gemv_rows(t: Target) -> tuple[int, int]:
    return 1, TURING_GEMV_MAX_M if _turing(t) else GEMV_MAX_M


def _spec(kernel: str, rows, check, min_cap=None) -> KernelSpec:
    return KernelSpec(f"paroquant.{kernel}", "cuda", rows, min_cap, check)


# Priority order. mma_gl takes M = 1..16 on sm_80+; Turing keeps decode rows on the Gluon GEMV up to
# TURING_GEMV_MAX_M and dequantizes to the scratch above; the W4A16 prefill runs the scratch path
# (on the H200 faster than the fused kernels at every prefill M measured, 128..2048, all four 27B
# shapes, by 1.03-2.9x; below Ampere the fused tile that fits 64 KB is too small for the tensor
# cores) except wgmma's band on sm_90's wide layers; wgmma, then deq take every prefill row when
# the scratch path is disabled. W4A8 keeps its int8 GEMMs (deq, fold): the scratch path multiplies
# fp16 activations.
KERNELS = register([
    _spec("mma_gl", lambda t: (1, MMA_GL_MAX_M), _gluon_w4a16, (8, 0)),
    _spec("gemv_gl", _gemv_gl_rows, _gluon_w4a16),
    _spec("gemv", _gemv_rows, _w4a16),
    _spec("wgmma", _wide_prefill, _wgmma),
    _spec("scratch", _scratch_rows, _w4a16),
    _spec("wgmma", _prefill, _wgmma),
    _spec("deqt", _decode, _w4a16),
    _spec("deq", _prefill, _w4a16),
    _spec("deq", _decode, _w4a8, (8, 0)),
    _spec("fold", _prefill, _w4a8, (8, 0)),
])
