"""pq2 kernel selection as data: which path runs for an M band under a kernel set, and the
tile configuration of each path for a shape on a device. Pure Python (unit-tested on CPU);
`pq2_ops` executes what this decides.

Kernel sets (RADIANCE_PQ2_KERNELS):
- legacy: the simplest correct kernel (`legacy`, one decode + int8 dot per group) everywhere,
  cuBLAS for unquantized skinny projections;
- exact: only paths bit-identical to legacy: the masked-plane tensor-core kernel without split-K
  for M >= 2, legacy at M = 1 (the DP4A GEMV sums its groups in another order);
- tuned: the fastest: DP4A GEMV at M = 1, the Gluon mma.sync kernel at M = 2..GLUON_MAX_M, the
  masked-plane kernel above (on sm_90 the Gluon async-wgmma kernels: the warp-specialized one at
  M = 17..64 on layers at least WGMMA_MIN_N wide and at M = 65..WS_MAX_M on narrower ones, the
  other above; both bit-identical to legacy, so `exact` takes them too),
  split-K where the grid is small, the skinny split-K GEMM.
A per-path switch (RADIANCE_PQ2_M1 / _SMALL / _PREFILL, RADIANCE_SKINNY_GEMM) overrides the set
for its band, for paired before/after runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SETS = ("tuned", "exact", "legacy")
BANDS = ("m1", "small", "prefill")
SMALL_MAX_M = 16

# band -> (knob, allowed paths)
SWITCHES = {
    "m1": ("RADIANCE_PQ2_M1", ("dp4a", "legacy")),
    "small": ("RADIANCE_PQ2_SMALL", ("planes", "gluon", "dp4a", "legacy")),
    "prefill": ("RADIANCE_PQ2_PREFILL", ("planes", "gluon_ring", "gluon_wgmma", "gluon_ws", "legacy")),
}
SET_PATHS = {
    "tuned": {"m1": "dp4a", "small": "planes", "prefill": "planes"},
    "exact": {"m1": "legacy", "small": "planes", "prefill": "planes"},
    "legacy": {"m1": "legacy", "small": "legacy", "prefill": "legacy"},
}


class Pq2ConfigError(ValueError):
    """A kernel-set or switch value that names no path."""


def band(m: int) -> str:
    if m < 1:
        raise ValueError(f"pq2 matmul with M={m} rows: M must be >= 1")
    return "m1" if m == 1 else "small" if m <= SMALL_MAX_M else "prefill"


def check_set(kernel_set: str) -> str:
    if kernel_set not in SETS:
        raise Pq2ConfigError(f"RADIANCE_PQ2_KERNELS={kernel_set!r}: use one of {', '.join(SETS)}")
    return kernel_set


TENSOR_CORE_PATHS = ("legacy", "planes", "gluon", "gluon_ring", "gluon_wgmma", "gluon_ws")  # int8 MMA: sm_80+ (Triton has no int8 dot on sm_75)
WGMMA_PATHS = ("gluon_wgmma", "gluon_ws")  # sm_90 only


# the tuned set's small band up to this many rows runs `gluon` (mma.sync with the weight words
# unpacked straight into the operand registers), above it `planes`: on the H200 (best tile of each)
# gluon is faster at M = 2..8 on gate_up, down, qkv and lm_head and ties on out at M = 2 and 8 (the
# DP4A GEMV with two token rows ties or loses everywhere); at M = 16 (16 tokens per MMA) `planes`
# leads on every shape.
GLUON_MAX_M = 8
# on sm_90 the prefill band from this many rows runs `gluon_wgmma` (async int8 wgmma, weights unpacked
# into its register A operand): on the H200 (best tile of each) faster than `planes` at M = 512 and
# 2048 on every shape; at M = 64 planes' split-K tiles keep down and out
WGMMA_MIN_M = 65
# ... and from M = 17 on layers this wide: with 64 x 32 token tiles at M <= 32 and 64 x 64 above,
# wgmma beats `planes` on the H200 on gate_up, on qkv from M = 48 (a tie below) and on lm_head
# (2-3x); on N = 5120 planes' split-K tiles stay ahead
WGMMA_MIN_N = 8192
# the warp-specialized wgmma kernel (`gluon_ws`: a loader warp feeds TMA stages, the warpgroup only
# waits, unpacks, multiplies and folds) takes those wide layers' M = 17..64 and the narrow layers'
# M = 65..WS_MAX_M: there, on the H200, it beats the path it replaced (gate_up and qkv at M = 17..64,
# lm_head at M = 17 and a tie at 64, down and out at M = 512). It loses at M = 2048 on every shape
# and above M = 64 on the wide ones; on N = 5120 at M <= 64 planes' split-K tiles keep down
WS_MAX_M = 512
# the paths whose GEMM launches dependent on the quantizer where the GPU can (kernels/pdl.py, sm_90+):
# on the H200 it takes 5-9 % off dp4a at M = 1 and 3-6 % off gluon at M = 2..8, on every shape and
# grid (split 1 to 8, stream-K). Not planes (M = 9..16, with its split-K reduce dependent on it in
# turn): 14-31 % slower on out, qkv and down, a tie on gate_up
PDL_PATHS = ("dp4a", "gluon")


def select_path(kernel_set: str, m: int, env: dict[str, str], capability: tuple[int, int] = (8, 0),
                n: int = 0) -> tuple[str, bool]:
    """-> (path, split_k_allowed) for M rows of a layer with N outputs on a GPU of `capability`.
    `env` holds the switches (os.environ or a test dict). Before sm_80 every band and set runs the
    DP4A kernel (the sets coincide there)."""
    b = band(m)
    path = SET_PATHS[check_set(kernel_set)][b]
    name, allowed = SWITCHES[b]
    raw = env.get(name, "")
    if raw:
        if raw not in allowed:
            raise Pq2ConfigError(f"{name}={raw!r}: use one of {', '.join(allowed)} (or unset it to follow the set)")
        path = raw
    elif kernel_set == "tuned" and b == "small" and m <= GLUON_MAX_M:
        path = "gluon"
    elif kernel_set in ("tuned", "exact") and b == "prefill" and capability[0] == 9:
        wide = n >= WGMMA_MIN_N
        if (wide and m < WGMMA_MIN_M) or (not wide and WGMMA_MIN_M <= m <= WS_MAX_M):
            path = "gluon_ws"
        elif wide or m >= WGMMA_MIN_M:
            path = "gluon_wgmma"
    if capability < (8, 0):
        if raw in TENSOR_CORE_PATHS:
            raise Pq2ConfigError(f"{name}={raw}: int8 tensor-core kernels need sm_80+, this GPU is "
                                 f"sm_{capability[0]}{capability[1]}; unset it (DP4A runs every M there)")
        return "dp4a", kernel_set == "tuned"
    if raw in WGMMA_PATHS and capability[0] != 9:
        raise Pq2ConfigError(f"{name}={raw}: wgmma is sm_90 only, this GPU is sm_{capability[0]}{capability[1]}; "
                             "use planes or gluon_ring")
    # split-K changes the fp32 summation order: off in `exact` (and meaningless for legacy)
    return path, kernel_set == "tuned"


def skinny_enabled(kernel_set: str, env: dict[str, str], capability: tuple[int, int] = (8, 0)) -> bool:
    """Whether unquantized projections that skinny_applies to take the split-K GEMM: the tuned set's
    default on sm_80+. Below sm_80 Triton lowers its dot to FMA and the tile spills ~300 bytes of
    registers per thread (kernels/tests/test_offline_compile.py, sm_75), so cuBLAS keeps them there."""
    raw = env.get("RADIANCE_SKINNY_GEMM", "")
    if raw:
        if raw not in ("0", "1"):
            raise Pq2ConfigError(f"RADIANCE_SKINNY_GEMM={raw!r}: use 1 (split-K Triton GEMM) or 0 (cuBLAS)")
        if raw == "1" and capability < (8, 0):
            raise Pq2ConfigError(f"RADIANCE_SKINNY_GEMM=1 needs tensor-core dots (sm_80+); this GPU is "
                                 f"sm_{capability[0]}{capability[1]}: unset it or use 0 (cuBLAS)")
        return raw == "1"
    return check_set(kernel_set) == "tuned" and capability >= (8, 0)


@dataclass(frozen=True)
class Tile:
    bn: int  # weight rows per program
    bt: int = 16  # tokens per program (tensor-core paths)
    bc: int = 8  # groups per step (DP4A GEMV, gluon)
    mr: int = 1  # token rows per program (DP4A GEMV)
    rr: int = 1  # DP4A GEMV: the bn rows as rr sub-tiles that share each activation load
    splits: int = 1
    warps: int = 4
    stages: int = 3  # pipeline stages (Triton paths); gluon: 1 = the next step in registers, else a cp.async ring
    one_dot: bool = False  # planes path: one K=128 dot per group instead of four K=32 ones
    maxnreg: int = 0  # register cap per thread, 0 = the compiler's choice (more programs per SM; not gluon)
    overlap: bool = True  # gluon_wgmma: fold group g - 1 while group g's MMA runs (a second int32 dot live)
    persist: int = 0  # gluon: a stream-K grid of this many programs per SM (splits unused), 0 = tiles x splits


def _splits_for(programs: int, steps: int, sms: int, min_steps: int, cap: int = 16) -> int:
    # split K until the grid holds ~2 waves, keeping >= min_steps loop steps per split
    s = 1
    while programs * s < 2 * sms and s * 2 <= cap and steps // (s * 2) >= min_steps:
        s *= 2
    return s


def tile_class(m: int) -> str:
    """Tile classes (finer than the bands): m1, small (2..16), mid (17..64), large (> 64)."""
    return "m1" if m == 1 else "small" if m <= SMALL_MAX_M else "mid" if m <= 64 else "large"


# measured winners per (device family, path, n, k, tile class), from H200 sweeps (bench/bench_pq2.py
# --sweep): the fastest tile summed over the class's M values; the one-dot tiles won the small, mid
# and large classes on the four 27B shapes. The M = 1 GEMV: the [BN, BC, 8] tile on block-major
# weights, 8-16 rows per program, two row sub-tiles sharing each activation load (rr 2: faster on
# gate_up, down and lm_head, a tie on qkv; out loses 4 % with it and keeps 8 rows)
_WIDE = Tile(bn=16, bc=8, rr=2)
_NARROW = Tile(bn=16, bc=16, warps=8, rr=2)
# token rows (the DP4A GEMV at M > 1: sm_75's small band) keep a single sub-tile
_ROWS_WIDE = Tile(bn=16, bc=8)
_ROWS_NARROW = Tile(bn=8, bc=16)
# 32-token blocks on 128 weight rows beat 64 x 64 by 7-38 % at M = 32..64
_MID2 = Tile(bn=128, bt=32, splits=2, one_dot=True)
_MID4 = Tile(bn=128, bt=32, splits=4, one_dot=True)
_LARGE = Tile(bn=64, bt=128, stages=2, one_dot=True)  # one dot: -34 %; two stages: -5 to -10 %
_S4 = Tile(bn=128, bt=16, splits=4, one_dot=True)  # one dot: -2 to -5 % at M = 2..16
_S8 = Tile(bn=128, bt=16, splits=8, one_dot=True)
# M = 2..8, bt 8: the fastest gluon tile over the three M of each shape
_G128 = Tile(bn=128, bt=8, bc=2, stages=1)
TUNED: dict[tuple[str, str, int, int, str], Tile] = {}
for (_n, _k), (_m1, _small, _mid, _gluon) in {
    # gate_up: the same tile on a stream-K grid of 3 programs per SM (its 272 tiles filled 2.06 of an
    # SM's 4 slots): faster at M = 2, a tie at M = 8 (down, qkv, out: stream-K lost)
    (34816, 5120): (_WIDE, _S4, _MID2, replace(_G128, persist=3)),  # gate_up
    (5120, 17408): (_NARROW, _S8, _MID4, Tile(bn=64, bt=8, bc=2, splits=8, stages=1)),  # down
    (14336, 5120): (_WIDE, _S4, _MID2, replace(_G128, splits=4)),  # qkv
    (5120, 6144): (Tile(bn=8, bc=16, warps=8), _S8, _MID4, Tile(bn=64, bt=8, bc=1, splits=8, stages=1)),  # out
    (248320, 5120): (_WIDE, Tile(bn=256, bt=16), Tile(bn=64, bt=64), _G128),  # lm_head
}.items():
    TUNED[("sm_90", "dp4a", _n, _k, "m1")] = _m1
    TUNED[("sm_90", "planes", _n, _k, "small")] = _small
    TUNED[("sm_90", "planes", _n, _k, "mid")] = _mid
    TUNED[("sm_90", "planes", _n, _k, "large")] = _LARGE
    TUNED[("sm_90", "gluon", _n, _k, "small")] = _gluon
# out at M = 65..512: 128 rows x 32 tokens beat the heuristic's 64 x 64 by ~6 % at M = 512
TUNED[("sm_90", "gluon_ws", 5120, 6144, "large")] = Tile(bn=128, bt=32, warps=4, stages=4, maxnreg=128, overlap=False)


# the tuning space bench/bench_pq2.py --sweep times (and test_pq2_gpu checks exactly)
CANDIDATES: dict[str, list[Tile]] = {
    "dp4a": [Tile(bn=32, bc=8, warps=8), Tile(bn=16, bc=8, warps=4), Tile(bn=64, bc=8, warps=8), Tile(bn=8, bc=16, warps=4),
             Tile(bn=16, bc=8, warps=4, splits=2), Tile(bn=8, bc=8), Tile(bn=4, bc=16), Tile(bn=32, bc=8, warps=4),
             Tile(bn=8, bc=16, splits=2)]
    # the [BN, BC, 8] tile on the block-major weights puts the warps across groups
    + [Tile(bn=16, bc=8, warps=8), Tile(bn=16, bc=16, warps=8), Tile(bn=32, bc=16, warps=8),
       Tile(bn=16, bc=8, warps=8, splits=2), Tile(bn=16, bc=16, warps=8, splits=2), Tile(bn=16, bc=8, warps=8, splits=4),
       Tile(bn=64, bc=8, warps=8, splits=2)]
    # warps >= groups per step keep the activations in the tile's layout (1 conversion in the loop,
    # 6 for down's 8 x 16 x 4 warps; offline TTGIR) -- and still lose on down, tie on out
    + [Tile(bn=8, bc=16, warps=8), Tile(bn=8, bc=8, warps=8), Tile(bn=8, bc=16, warps=8, splits=2)]
    # rr row sub-tiles per program, each activation load serving rr weight words per thread
    + [Tile(bn=16, bc=8, rr=2), Tile(bn=32, bc=8, rr=4), Tile(bn=32, bc=8, rr=2), Tile(bn=16, bc=16, warps=8, rr=2),
       Tile(bn=32, bc=16, warps=8, rr=4), Tile(bn=64, bc=8, warps=8, rr=4), Tile(bn=32, bc=8, rr=4, splits=2),
       Tile(bn=32, bc=16, warps=8, rr=4, splits=2)],
    "m1": [],
    "small": [Tile(bn=256, bt=16, splits=s) for s in (1, 2, 4, 8)] + [Tile(bn=128, bt=16, splits=s) for s in (4, 8)]
    + [Tile(bn=64, bt=16, splits=s) for s in (2, 4, 8)]  # more programs in flight: the paroquant deq lesson
    + [Tile(bn=256, bt=16, splits=4, one_dot=True), Tile(bn=128, bt=16, splits=4, one_dot=True),
       Tile(bn=128, bt=16, splits=8, one_dot=True)]
    # two stages won the prefill tile (more programs per SM); tried here too
    + [Tile(bn=128, bt=16, splits=s, stages=2, one_dot=True) for s in (4, 8)],
    "mid": [Tile(bn=64, bt=64, splits=2), Tile(bn=64, bt=64), Tile(bn=64, bt=64, splits=2, one_dot=True),
            Tile(bn=64, bt=64, one_dot=True)]
    # narrower token blocks and more programs (the small band's tiles re-read each weight byte
    # per token block from L2, but keep more groups in flight)
    + [Tile(bn=bn, bt=bt, splits=s, one_dot=True) for bn, bt, s in
       ((128, 16, 4), (128, 32, 2), (128, 32, 4), (64, 32, 2), (64, 32, 4), (64, 64, 4))]
    + [Tile(bn=128, bt=64, warps=8, splits=2, one_dot=True), Tile(bn=64, bt=64, stages=4, splits=2, one_dot=True)]
    + [Tile(bn=128, bt=32, splits=s, stages=2, one_dot=True) for s in (2, 4)]
    # 128x32 takes 156 registers (3 programs per SM; 64x64 took 232, which is likely why it lost);
    # capped at 128: 4 programs, 984 instructions (928), 72 stack bytes
    + [Tile(bn=128, bt=32, splits=s, one_dot=True, maxnreg=128) for s in (2, 4)],
    "prefill": [Tile(bn=64, bt=128), Tile(bn=64, bt=128, one_dot=True), Tile(bn=128, bt=64, one_dot=True),
                Tile(bn=128, bt=128, one_dot=True), Tile(bn=64, bt=128, stages=4, one_dot=True),
                Tile(bn=64, bt=128, warps=8, one_dot=True), Tile(bn=64, bt=64, one_dot=True),
                Tile(bn=128, bt=64, warps=8, one_dot=True), Tile(bn=64, bt=128, stages=2, one_dot=True),
                Tile(bn=64, bt=128, stages=1, one_dot=True), Tile(bn=128, bt=64, stages=2, one_dot=True)]
    # the 64x128 tile takes 233 registers per thread: 2 programs per SM (offline sm_90 SASS); capped
    # at 168 / 128: 3 / 4 programs, for 1000 / 1176 instructions (864) and 208 / 424 stack bytes
    + [Tile(bn=64, bt=128, stages=2, one_dot=True, maxnreg=r) for r in (168, 128)],
    # the DP4A GEMV with mr token rows per program (small band, M = 2..8)
    "dp4a_rows": [Tile(bn=64, bc=8, warps=8, mr=2), Tile(bn=32, bc=8, warps=8, mr=2), Tile(bn=64, bc=8, warps=8, mr=4),
                  Tile(bn=32, bc=8, warps=8, mr=4), Tile(bn=8, bc=16, mr=2), Tile(bn=8, bc=16, mr=4),
                  Tile(bn=16, bc=8, warps=4, mr=4)],
    # Gluon mma.sync (pq2_gluon): bn = weight rows (16 x warps x a power of two), bt = 8 or 16
    # tokens (the sweep times bt 16 only above M = 8); the weights of the next bc groups in
    # registers (stages 1) or `stages` groups through a cp.async ring (bc 1). Loading two groups
    # ahead through a register queue measured slower.
    # Gluon mma.sync fed by a shared-memory ring of activations (pq2_gluon_ring, M > 16): bn = 16 x
    # warps x a power of two weight rows, bt tokens, `stages` ring stages (a power of two); no split-K
    "gluon_ring": [Tile(bn=bn, bt=bt, warps=w, stages=st) for bn, w, bt in
                   ((128, 4, 64), (256, 8, 64), (128, 4, 32), (256, 8, 32), (64, 4, 128), (64, 2, 64), (128, 8, 64))
                   for st in (2, 4)],
    # Gluon async wgmma (pq2_gluon_wgmma, sm_90, M > 16): bn = 64 x warpgroups x a power of two, bt
    # tokens, `stages` >= 3 ring stages; no split-K. 4 stages and no in-program overlap won
    # on every shape and M (fewer registers and less shared memory: more programs per SM)
    "gluon_wgmma": [Tile(bn=bn, bt=bt, warps=w, stages=st, overlap=ov) for bn, w, bt in
                    ((64, 4, 64), (128, 4, 64), (128, 8, 128), (256, 8, 64)) for st in (4, 6, 8) for ov in (True, False)]
    # narrow token tiles for M = 17..64
    + [Tile(bn=bn, bt=32, warps=4, stages=4, overlap=False) for bn in (64, 128)],
    # the warp-specialized wgmma kernel (pq2_gluon_ws, sm_90, M > 16): bn rows of one 128-row weight
    # block, bt tokens, `stages` ring stages fed by one loader warp; maxnreg caps the registers per
    # thread before the partitions re-split them (80: 3 programs per SM, 128: 2). Folding group g - 1
    # during group g's wgmma (overlap) never won on the H200, so the kernel has no such variant
    "gluon_ws": [Tile(bn=bn, bt=bt, warps=4, stages=4, maxnreg=r, overlap=False) for bn, bt, r in
                 ((128, 64, 128), (64, 64, 80), (128, 32, 128), (64, 32, 80))],
    "gluon": [Tile(bn=bn, bt=bt, bc=gu, warps=w, splits=s, stages=st) for bt in (8, 16)
              for bn, w in ((64, 4), (128, 4), (256, 4), (256, 8)) for s in (1, 2, 4, 8)
              for gu, st in ((1, 1), (2, 1), (1, 4), (1, 8))]
    # the same on stream-K grids: every SM holds `persist` programs sharing all (tile, group) steps
    # (a tiles x splits grid leaves a wave partly empty: gate_up's 272 tiles fill 2.06 of an SM's 4 slots)
    + [Tile(bn=bn, bt=8, bc=gu, warps=4, stages=st, persist=q) for bn in (64, 128) for gu, st in ((1, 1), (2, 1), (1, 4))
       for q in (2, 3, 4, 6)],
}


def _sm(family: str) -> int:
    # "sm_86" -> 86; "" (no GPU: the CPU interpreter) -> 0
    return int(family[3:]) if family else 0


def tile_for(path: str, n: int, k: int, m: int, sms: int, split_k: bool, family: str = "") -> Tile:
    """Tile configuration for a path on a shape: the measured table entry, else the heuristic."""
    if k % 128:
        raise ValueError(f"pq2 K={k} is not a multiple of the 128-group")
    groups = k // 128
    t = TUNED.get((family, path, n, k, tile_class(m)))
    if t is None:
        if path == "dp4a":  # the H200 sweeps: wide layers 16 rows x 8 groups, narrow ones 16 x 16 (8 warps)
            if m == 1:
                t = _WIDE if n >= 8192 else _NARROW
            else:  # token rows sharing each weight word
                t = replace(_ROWS_WIDE if n >= 8192 else _ROWS_NARROW, mr=2 if m == 2 else 4)
            # every timed rows tile ran unsplit (its programs already re-use each weight word mr times)
            t = replace(t, splits=_splits_for(-(-n // t.bn), -(-groups // t.bc), sms, 2) if split_k and t.mr == 1 else 1)
        elif path == "planes":
            if m <= 16:
                t = Tile(bn=128, bt=16, warps=4, stages=3, one_dot=True)
            elif m <= 64:
                t = Tile(bn=128, bt=32, warps=4, stages=3, one_dot=True)
            else:  # below sm_90 on 8 warps: the same tile on 4 spills under Triton 3.9 (test_offline_compile)
                t = Tile(bn=64, bt=128, warps=8 if 0 < _sm(family) < 90 else 4, stages=2, one_dot=True)
            programs = -(-n // t.bn) * -(-m // t.bt)
            t = replace(t, splits=_splits_for(programs, groups, sms, 4) if split_k else 1)
        elif path == "gluon":
            t = Tile(bn=128, bt=8, bc=2, stages=1)
            t = replace(t, splits=_splits_for(-(-n // t.bn) * -(-m // t.bt), groups, sms, 4) if split_k else 1)
        elif path == "gluon_ring":
            t = Tile(bn=128, bt=64, warps=4, stages=2)
        elif path == "gluon_wgmma":  # the H200's winners: 128 x 64 at M >= 512 on gate_up, down, qkv,
            # out; 64 x 64 at M = 64; 64 x 32 at M <= 32 (~1.6x faster than 64 x 64 at M = 17)
            t = Tile(bn=128 if m > 64 else 64, bt=32 if m <= 32 else 64, warps=4, stages=4, overlap=False)
        elif path == "gluon_ws":  # the H200's winners: 64 rows x 32 tokens up to M = 32, x 64 above, at 3 programs per SM
            t = Tile(bn=64, bt=32 if m <= 32 else 64, warps=4, stages=4, maxnreg=80, overlap=False)
        elif path == "legacy":
            t = Tile(bn=64, bt=16 if m <= 16 else 64, warps=4, stages=1)
        else:
            raise Pq2ConfigError(f"unknown pq2 path {path!r}")
    if not split_k:
        t = replace(t, splits=1)
    return t


@dataclass(frozen=True)
class SkinnyTile:
    bn: int = 32
    bk: int = 128
    ksplit: int = 256
    warps: int = 4


SKINNY_MAX_M = 16
SKINNY_MAX_N = 256


def skinny_applies(m: int, n: int, k: int) -> bool:
    """The split-K GEMM only for few rows of a narrow projection; cuBLAS does the rest well."""
    return m <= SKINNY_MAX_M and n <= SKINNY_MAX_N and k % 128 == 0
