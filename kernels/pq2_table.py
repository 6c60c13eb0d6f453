"""pq2 kernel selection as data: which kernel serves which rows of a layer on which GPU (the
registry `KERNELS`, in priority order; kernels/registry.py chooses at prepare), and each kernel's
tile for a shape on a card: the tuner's measured winners from `tiles/<arch>.json` (written by
`bench/bench_pq2.py --sweep --write-tiles`), else the heuristic here. Pure Python (unit-tested
on CPU); `pq2_ops` executes what this decides. docs/nvidia.md has the band -> kernel table.

Kernels: `dp4a` (the DP4A GEMV: M = 1, and every row below sm_80), `gluon` (int8 mma.sync in
Gluon, weight words unpacked straight into the operand registers: M = 2..GLUON_MAX_M), `planes`
(the masked-plane int8 tl.dot kernel: the rest on sm_80+), on sm_90 `gluon_ws` and `gluon_wgmma`
(async int8 wgmma in Gluon; warp-specialized / not) for the prefill bands below, and `legacy`
(the simplest correct kernel, one decode + int8 dot per group). Bit-identical to legacy (the
`exact` test fixture takes only these, without split-K): planes, gluon_ws, gluon_wgmma.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from radiance.kernels.registry import ROWS_MAX, KernelSpec, Target, register

SMALL_MAX_M = 16
TILES = Path(__file__).parent / "tiles"


class Pq2ConfigError(ValueError):
    """A tile or launch a pq2 kernel cannot take."""


# the small band up to this many rows runs `gluon` (mma.sync with the weight words unpacked straight
# into the operand registers), above it `planes`: on the H200 (best tile of each) gluon is faster at
# M = 2..8 on gate_up, down, qkv and lm_head and ties on out at M = 2 and 8 (the DP4A GEMV with two
# token rows ties or loses everywhere); at M = 16 (16 tokens per MMA) `planes` leads on every shape.
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
# the kernels whose GEMM launches dependent on the quantizer where the GPU can (kernels/pdl.py, sm_90+):
# on the H200 it takes 5-9 % off dp4a at M = 1 and 3-6 % off gluon at M = 2..8, on every shape and
# grid (split 1 to 8, stream-K). Not planes (M = 9..16, with its split-K reduce dependent on it in
# turn): 14-31 % slower on out, qkv and down, a tie on gate_up
PDL_PATHS = ("dp4a", "gluon")


# ----------------------------------------------------------------------------- the registry
def _gluon(t: Target) -> str | None:
    return "Gluon: not under the Triton interpreter" if t.interpret else None


def _sm90(t: Target) -> str | None:
    return "wgmma is sm_90 only" if (t.cap or (0, 0))[0] != 9 else _gluon(t)


def _ws_rows(t: Target) -> tuple[int, int]:
    return (SMALL_MAX_M + 1, WGMMA_MIN_M - 1) if t.n >= WGMMA_MIN_N else (WGMMA_MIN_M, WS_MAX_M)


def _wgmma_rows(t: Target) -> tuple[int, int]:
    return (SMALL_MAX_M + 1 if t.n >= WGMMA_MIN_N else WGMMA_MIN_M), ROWS_MAX


def _spec(kernel: str, rows, check=None, min_cap=None, exact=False) -> KernelSpec:
    return KernelSpec(f"pq2.{kernel}", "cuda", rows, min_cap, check, exact)


# Priority order. Int8 tensor-core dots need sm_80+ (Triton has none on sm_75): there the DP4A
# GEMV runs every row (its last entry).
KERNELS = register([
    _spec("dp4a", lambda t: (1, 1)),
    _spec("gluon", lambda t: (2, GLUON_MAX_M), _gluon, (8, 0)),
    _spec("gluon_ws", _ws_rows, _sm90, (9, 0), exact=True),
    _spec("gluon_wgmma", _wgmma_rows, _sm90, (9, 0), exact=True),
    _spec("planes", lambda t: (2, ROWS_MAX), None, (8, 0), exact=True),
    _spec("legacy", lambda t: (1, ROWS_MAX), None, (8, 0), exact=True),
    _spec("dp4a", lambda t: (1, ROWS_MAX)),
])


def _skinny(t: Target) -> str | None:
    return None if t.n <= SKINNY_MAX_N and t.k % 128 == 0 else f"N <= {SKINNY_MAX_N} and K a multiple of 128 only"


# unquantized (skipped) linears on NVIDIA: the split-K Triton GEMM for few rows of a narrow
# projection on sm_80+ (below, Triton lowers its dot to FMA and the tile spills ~300 bytes of
# registers per thread: kernels/tests/test_offline_compile.py, sm_75), cuBLAS for the rest
DENSE_KERNELS = register([
    KernelSpec("dense.skinny", "cuda", lambda t: (1, SKINNY_MAX_M), (8, 0), _skinny),
    KernelSpec("dense.cublas", "cuda", lambda t: (1, ROWS_MAX), exact=True),
])


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
    persist: int = 0  # gluon: a stream-K grid of this many programs per SM (splits unused), 0 = tiles x splits


def _splits_for(programs: int, steps: int, sms: int, min_steps: int, cap: int = 16) -> int:
    # split K until the grid holds ~2 waves, keeping >= min_steps loop steps per split
    s = 1
    while programs * s < 2 * sms and s * 2 <= cap and steps // (s * 2) >= min_steps:
        s *= 2
    return s


TILE_CLASSES = ("m1", "small", "mid", "large")


def tile_class(m: int) -> str:
    """Tile classes (finer than the bands): m1, small (2..16), mid (17..64), large (> 64)."""
    return "m1" if m == 1 else "small" if m <= SMALL_MAX_M else "mid" if m <= 64 else "large"


# the heuristic's M = 1 GEMV: the [BN, BC, 8] tile on block-major weights, two row sub-tiles sharing
# each activation load (the H200's tuned tiles of the wide / narrow 27B shapes)
_WIDE = Tile(bn=16, bc=8, rr=2)
_NARROW = Tile(bn=16, bc=16, warps=8, rr=2)
# token rows (the DP4A GEMV at M > 1: sm_75's small band) keep a single sub-tile
_ROWS_WIDE = Tile(bn=16, bc=8)
_ROWS_NARROW = Tile(bn=8, bc=16)


@functools.cache
def tuned(arch: str) -> dict[tuple[str, int, int, str], Tile]:
    """The tuner's winners for a card, (kernel, n, k, tile class) -> Tile, from tiles/<arch>.json
    (none for a card without a file: the heuristic serves it)."""
    path = TILES / f"{arch}.json"
    if not arch or not path.is_file():
        return {}
    known = {f.name for f in fields(Tile)}
    out = {}
    for e in json.loads(path.read_text())["pq2"]:
        bad = set(e["tile"]) - known
        if bad or e["rows"] not in TILE_CLASSES:
            raise ValueError(f"{path}: entry {e} has unknown tile fields {sorted(bad)} or rows (use {TILE_CLASSES})")
        out[(e["kernel"], e["n"], e["k"], e["rows"])] = Tile(**e["tile"])
    return out


def write_tiles(path: Path, winners: dict[tuple[str, int, int, str], Tile]) -> None:
    """The tuner's output: one entry per line, only a tile's non-default fields beside bn."""
    base = asdict(Tile(bn=0))
    lines = [json.dumps({"kernel": kern, "n": n, "k": k, "rows": cls,
                         "tile": {f: v for f, v in asdict(t).items() if f == "bn" or v != base[f]}})
             for (kern, n, k, cls), t in sorted(winners.items())]
    path.write_text(f'{{"card": "{path.stem}", "written_by": "bench/bench_pq2.py --sweep --write-tiles",\n'
                    ' "pq2": [\n  ' + ",\n  ".join(lines) + "\n]}\n")


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
    # Gluon async wgmma (pq2_gluon_wgmma, sm_90, M > 16): bn = 64 x warpgroups x a power of two, bt
    # tokens, `stages` >= 3 ring stages; no split-K.
    "gluon_wgmma": [Tile(bn=bn, bt=bt, warps=w, stages=st) for bn, w, bt in
                    ((64, 4, 64), (128, 4, 64), (128, 8, 128), (256, 8, 64)) for st in (4, 6, 8)]
    # narrow token tiles for M = 17..64
    + [Tile(bn=bn, bt=32, warps=4, stages=4) for bn in (64, 128)],
    # the warp-specialized wgmma kernel (pq2_gluon_ws, sm_90, M > 16): bn rows of one 128-row weight
    # block, bt tokens, `stages` ring stages fed by one loader warp; maxnreg caps the registers per
    # thread before the partitions re-split them (80: 3 programs per SM, 128: 2).
    "gluon_ws": [Tile(bn=bn, bt=bt, warps=4, stages=4, maxnreg=r) for bn, bt, r in
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
    t = tuned(family).get((path, n, k, tile_class(m)))
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
        elif path == "gluon_wgmma":  # the H200's winners: 128 x 64 at M >= 512 on gate_up, down, qkv,
            # out; 64 x 64 at M = 64; 64 x 32 at M <= 32 (~1.6x faster than 64 x 64 at M = 17)
            t = Tile(bn=128 if m > 64 else 64, bt=32 if m <= 32 else 64, warps=4, stages=4)
        elif path == "gluon_ws":  # the H200's winners: 64 rows x 32 tokens up to M = 32, x 64 above, at 3 programs per SM
            t = Tile(bn=64, bt=32 if m <= 32 else 64, warps=4, stages=4, maxnreg=80)
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
