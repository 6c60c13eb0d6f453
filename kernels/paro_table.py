"""paroquant kernel selection as data: which GEMM kind and tile serve M rows of a layer on a GPU
capability, the tiles' shared-memory fit, and the knobs that steer the choice. Decided per call by
`paro_ops.tile_for`, executed by `paro_ops.forward`; unit-tested on CPU with faked capabilities.

| capability | M <= RADIANCE_PQ_DECODE_MAX_M | M above |
|---|---|---|
| sm_80+ | split-K: W4A16 M = 1..MMA_GL_MAX_M `mma_gl` (mma.sync, weights unpacked into fragment registers, a cp.async ring; RADIANCE_PQ_GEMV picks another M = 1 kernel), else `deqt` (W4A8: `deq`) | W4A16: dequant to fp16 scratch + cuBLAS (RADIANCE_PQ_SCRATCH_GEMM); on sm_90 rows up to WGMMA_MAX_M of layers N >= WGMMA_MIN_N first run `wgmma` (paro_wgmma: fp16 wgmma, the weights dequantized into its register operand); W4A8 (RADIANCE_PQ_I8=1): `fold` tiles |
| sm_75 | W4A16 M <= TURING_GEMV_MAX_M: `gemv_gl` (up to 4 rows per program); above: dequant to fp16 scratch + cuBLAS | dequant to fp16 scratch + cuBLAS |

GEMM kinds (triton/paro_gemm.py): `deqt` (W4A16 only: weights dequantized in registers as the
MMA's A operand, x rows its N side -- on sm_90 the weights never pass through shared memory),
`deq` (the same with the weights as the MMA's B operand, staged in shared memory; W4A16 reads
plain fp16 activations, as AWQ/Marlin do, so |rotated activation| must stay below 65504; W4A8
reads per-group int8 and folds the zero point per group), `fold` (transposed MMA on (c - 8) with
fp16 activations scaled per (row, group) by a power of two: no range limit; `fold1` the same
with the group as one K = 128 dot), `gemv` (CUDA cores). W4A8 needs int8 tensor-core dots (sm_80+); asking for it below is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import triton

from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.triton import interpreting, paro_rotate
from radiance.kernels.triton.split_finish import stream_programs
from radiance.knobs import knob, knob_int

W4A16_ONLY = ("deqt", "gemv", "gemv_gl", "gemv_ca", "mma_gl", "wgmma")  # kinds that multiply fp16/fp32 activations only
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
    kind: str = "deq"  # "deq" | "deqt" | "fold" | "fold1" | "gemv" (paro_gemm.KERNELS) | "gemv_gl" | "gemv_ca"
    # (paro_gemv_gluon) | "mma_gl" (paro_mma_gluon; bm = 8 or 16 tokens per program) | "wgmma" (paro_wgmma, sm_90 prefill)
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
    return {"deq": paro_rotate.PLAIN, "deqt": paro_rotate.PLAIN, "fold": paro_rotate.F16G, "fold1": paro_rotate.F16G,
            "gemv": paro_rotate.ROT32P, "gemv_gl": paro_rotate.ROT32P, "gemv_ca": paro_rotate.ROT32P,
            "mma_gl": paro_rotate.F16GF, "wgmma": paro_rotate.PLAINW}[kind]


def smem_bytes(t: Tile, act_bytes: int) -> int:
    """Shared memory the GEMM asks for: pipelined weight + activation tiles per stage, plus the
    dequantized weight operand staged once. The Gluon gemv keeps everything in registers (1 KB
    for its final cross-warp sum); gemv_ca and mma_gl with stages > 1 add their ring of weight tiles
    (mma_gl from 3 stages: also the activation words, scales, zero points and token scales / sums)."""
    if t.kind == "gemv_gl" or (t.kind == "mma_gl" and t.stages == 1):
        return 1024
    if t.kind == "mma_gl" and t.stages > 2:
        return 1024 + t.stages * (t.bn * 64 + t.bm * 256 + t.bn * 3 + t.bm * 8)
    if t.kind in ("gemv_ca", "mma_gl"):
        return 1024 + t.stages * t.gpi * t.bn * 64
    if t.kind == "wgmma":  # the activation ring only (weights go straight to registers)
        return 1024 + t.stages * t.bm * GROUP_SIZE * 2
    return t.stages * (t.bn * 64 + t.bm * GROUP_SIZE * act_bytes) + t.bn * GROUP_SIZE * act_bytes


def fit_tile(t: Tile, limit: int, act_bytes: int = 2) -> Tile:
    """Halve stages (to 2), then BM (to 16), then BN (to 64) until the tile fits `limit` bytes."""
    while smem_bytes(t, act_bytes) > limit:
        if t.stages > 2:
            t = replace(t, stages=t.stages - 1)
        elif t.bm > 16:
            t = replace(t, bm=t.bm // 2)
        elif t.bn > 64:
            t = replace(t, bn=t.bn // 2, warps=max(4, t.warps // 2))
        else:
            raise ValueError(f"paroquant: no GEMM tile fits {limit} bytes of shared memory")
    return t


def smem_limit(cap: tuple[int, int]) -> int:
    if cap in SMEM_LIMIT:
        return SMEM_LIMIT[cap]
    return SMEM_LIMIT[(9, 0)] if cap >= (9, 0) else SMEM_LIMIT[(8, 6)] if cap >= (8, 0) else SMEM_LIMIT[(7, 5)]


def scratch_gemm_preferred(cap: tuple[int, int], i8: bool) -> bool:
    """Prefill (M above the decode band) through dequant-to-scratch + cuBLAS: by default for W4A16
    on every GPU -- on the H200 it beat the fused Triton GEMM at every prefill M measured (128..2048,
    all four 27B shapes, by 1.03-2.9x) and below Ampere the fused tile that fits
    64 KB is too small for the tensor cores. W4A8 keeps its int8 GEMM (the scratch path multiplies
    fp16 activations, so asking for both is an error). RADIANCE_PQ_SCRATCH_GEMM=0/1 overrides."""
    raw = knob("RADIANCE_PQ_SCRATCH_GEMM")
    if raw in (None, ""):
        return not i8
    if raw not in ("0", "1"):
        raise ValueError(f"RADIANCE_PQ_SCRATCH_GEMM={raw!r}: use 0, 1 or leave it unset")
    if raw == "1" and i8:
        raise ValueError("RADIANCE_PQ_SCRATCH_GEMM=1 computes the prefill in W4A16 (fp16 activations), "
                         "RADIANCE_PQ_I8=1 asks for W4A8: unset one of them")
    return raw == "1"


def wgmma_prefill_max_m(cap: tuple[int, int], i8: bool, n: int, on_gpu: bool) -> int:
    """Prefill rows (above the decode band) that run the fused wgmma GEMM before the scratch path
    takes over: WGMMA_MAX_M for W4A16 on sm_90 layers of N >= WGMMA_MIN_N when
    RADIANCE_PQ_SCRATCH_GEMM is unset (`1` pins the scratch path for every prefill row), else 0."""
    if not on_gpu or interpreting() or cap[0] != 9 or i8 or n < WGMMA_MIN_N:
        return 0
    return WGMMA_MAX_M if knob("RADIANCE_PQ_SCRATCH_GEMM") in (None, "") else 0


def scratch_piece_rows() -> int:
    """RADIANCE_PQ_SCRATCH_ROWS: weight rows per dequantized piece on the scratch path (a multiple
    of 128; 0 = the whole weight at once)."""
    rows = knob_int("RADIANCE_PQ_SCRATCH_ROWS")
    if rows < 0 or rows % 128:
        raise ValueError(f"RADIANCE_PQ_SCRATCH_ROWS={rows}: use 0 (the whole weight at once) or a positive "
                         "multiple of 128 (weight rows per dequantized piece)")
    return rows


def use_int8(cap: tuple[int, int]) -> bool:
    raw = knob("RADIANCE_PQ_I8") or "0"
    if raw not in ("0", "1"):
        raise ValueError(f"RADIANCE_PQ_I8={raw!r}: use 0 or 1")
    if raw == "1" and cap < (8, 0):
        raise ValueError(f"RADIANCE_PQ_I8=1 needs int8 tensor-core dots (sm_80+); this GPU is sm_{cap[0]}{cap[1]}. "
                         "Unset RADIANCE_PQ_I8 to serve W4A16")
    return raw == "1"


def gemv_kind(cap: tuple[int, int]) -> str:
    """The M = 1 W4A16 kernel: on sm_80+ the tensor-core `mma_gl` (fed by a cp.async ring, on the
    H200 it is ahead of the CUDA-core GEMV on gate_up, down and qkv, ~3 % behind on out), below that
    the Gluon CUDA-core GEMV, and the plain Triton one where Gluon cannot run (the CPU interpreter).
    RADIANCE_PQ_GEMV=mma|gluon|triton picks one (paired before/after runs)."""
    raw = knob("RADIANCE_PQ_GEMV")
    interpret = interpreting()
    if raw in (None, ""):
        return "gemv" if interpret else "mma_gl" if cap >= (8, 0) else "gemv_gl"
    if raw not in ("mma", "gluon", "triton"):
        raise ValueError(f"RADIANCE_PQ_GEMV={raw!r}: use mma, gluon, triton or leave it unset")
    if raw != "triton" and interpret:
        raise ValueError(f"RADIANCE_PQ_GEMV={raw}: the Triton interpreter cannot run Gluon kernels; "
                         "unset it or use triton")
    if raw == "mma" and cap < (8, 0):
        raise ValueError(f"RADIANCE_PQ_GEMV=mma needs mma.sync m16n8k16 (sm_80+); this GPU is "
                         f"sm_{cap[0]}{cap[1]}: use gluon or leave it unset")
    return {"mma": "mma_gl", "gluon": "gemv_gl", "triton": "gemv"}[raw]


def launches_dependent(t: Tile) -> bool:
    """Whether the tile's GEMM launches dependent on its prologue where the GPU can (kernels/pdl.py):
    mma_gl's 8-token tiles on a tiles x split grid with a short split (PDL_MAX_SPLIT)."""
    return t.kind == "mma_gl" and t.bm == 8 and not t.persist and t.split <= PDL_MAX_SPLIT


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    """Split-K tile for the decode band. W4A16: M = 1..MMA_GL_MAX_M on sm_80+ the Gluon tensor-core
    kind (M = 1: unless RADIANCE_PQ_GEMV picks a CUDA-core GEMV); else with M <= GEMV_GL_MAX_M
    (Gluon) or GEMV_MAX_M (plain Triton) -- on sm_75 up to TURING_GEMV_MAX_M -- CUDA cores; above,
    and for W4A8, the Triton tensor-core kinds."""
    # Tuned on the H200 (bench/sweep_paro_decode.py).
    # mma_gl: the weights, activations, scales and zero points through a 4-stage cp.async ring (ptxas
    # sinks a register prefetch to the loop's end); two m16 row tiles per warp: BN 128 on 4 warps on
    # the widest layers (the program's activation copy shared by more rows), else BN 64 on 2; split-K
    # to ~8 programs per SM counted in BN-64 blocks (a power of two, <= 8). At M = 2..8 it beats
    # gemv_gl and deqt on every shape; at M = 1 see gemv_kind.
    # M = 9..16: 16 tokens per program on the same ring (3 stages) beat deqt on gate_up, down and qkv
    # and lose ~3 % on out; split-K to about 5 programs per SM (132-146 registers: 3 to 7 programs
    # fit) -- twice that lost on qkv. On gate_up that grid is 544 programs on 396 slots (1.37 waves),
    # so the BN-128 layers run a stream-K grid of STREAM_PER_SM_16 programs per SM sharing all (tile,
    # group) steps equally; on the BN-64 layers (down, qkv, out) and at M <= 8 stream-K lost or tied
    # (1 program per tile fills the GPU already), so they keep split-K.
    # Gluon gemv (gemv_gl): 2 columns x 4 words per thread, 4 warps, everything of the next group
    # prefetched (stages 3), ~12 programs per SM by split-K (2 groups per step lost everywhere); at
    # M = 2 two rows per program share each decoded word, at M = 3, 4 the tensor cores win. Weights
    # 2-4 steps ahead (registers or the cp.async ring of `gemv_ca`) lost or tied on every shape at
    # M = 1, 2.
    # Triton gemv: BN 16, 2 warps, 4 groups per load. W4A16 rows mma_gl does not take, up to M = 64:
    # deqt, BN 64, 4 warps, 3 stages, split-K to ~16 programs per SM (8 at BM 64) -- faster than deq
    # (~1.5x on gate_up at M = 64). W4A8: deq, the same split rule.
    kind1 = gemv_kind(cap) if not i8 and (m == 1 or cap < (8, 0)) else None
    if not i8 and cap >= (8, 0) and not interpreting() and (2 <= m <= MMA_GL_MAX_M or kind1 == "mma_gl"):
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
    turing_gemv = cap < (8, 0) and not i8 and m <= TURING_GEMV_MAX_M
    if not i8 and (m <= GEMV_GL_MAX_M or turing_gemv) and kind1 == "gemv_gl":
        kind, bm, per_sm, gpi, cap_split = "gemv_gl", m if m <= 2 else 4, 12, 1, 8
        # 4 rows x 4 columns per thread would take 251 registers on sm_75 (offline SASS): 2 columns, 128
        bn, warps, stages = (64 if bm == 4 else 128 if m > 1 or n // 64 >= 4 * sms else 64), 4, 3 if m == 1 else 2
    elif not i8 and (m <= GEMV_MAX_M or turing_gemv):  # one row per program (any M)
        kind, bm, per_sm, gpi, cap_split = "gemv", 1, 4, next(x for x in (4, 2, 1) if groups % x == 0), 16
        bn, warps, stages = (16, 2, 1) if n // 16 >= 4 * sms else (16, 2, 2) if groups <= 64 else (64, 4, 3)
    else:
        bm = min(64, max(16, triton.next_power_of_2(m)))
        kind, per_sm, gpi, cap_split = "deq" if i8 else "deqt", 8 if bm == 64 else 16, 1, 4 if bm == 64 else 8
        bn, warps, stages = (64, 4, 4) if i8 else (64, 4, 3)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    split = max(1, min(groups // 2, triton.cdiv(per_sm * sms, tiles), cap_split))
    t = Tile(bm, bn, warps, stages, split, kind, gpi)
    return fit_tile(t, smem_limit(cap)) if cap < (9, 0) else t


def prefill_tile(cap: tuple[int, int], i8: bool, m: int = 2048) -> Tile:
    # W4A16 on sm_90: the fused wgmma kind (on the H200 at M = 2048 on gate_up 256 x 128 beats deq
    # 128 x 256 and deqt; 128-token tiles up to M = WGMMA_BT128_MAX_M), except under the CPU
    # interpreter, which runs no Gluon. Elsewhere W4A16 runs deq 128 x 256 (on the H200 faster than
    # 128 x 128); W4A8 fold 128 x 64 on 2 stages capped at 168 registers: 3 programs per SM instead
    # of 2, faster than uncapped or on 4 stages. The cap is sm_90's: for sm_86 the same tile compiles to
    # mma.sync with 253 registers, and capped it spills (offline SASS: 168 stack bytes, 73 local
    # loads/stores per group) -- unmeasured there, so the compiler's choice.
    if cap[0] == 9 and not i8 and not interpreting():
        return Tile(128 if m <= WGMMA_BT128_MAX_M else 256, 128, 8, 3, 1, "wgmma")
    maxnreg = 168 if cap >= (9, 0) else 0
    t = Tile(128, 64, 4, 2, 1, "fold", maxnreg=maxnreg) if i8 else Tile(128, 256, 8, 3, 1, "deq")
    return fit_tile(t, smem_limit(cap), 1 if i8 else 2)
