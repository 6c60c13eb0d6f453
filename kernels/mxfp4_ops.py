"""Per-layer paroquant_mxfp4 (MXFP4-PARO) ops on NVIDIA (Triton): prepare once from checkpoint
tensors, then forward -- paro_ops' API shape, so it registers as a ("paroquant_mxfp4", "cuda") kernel.

`prepare` lays out the e2m1 weights and e8m0 scales (triton/mxfp4_gemm.repack), builds the rotation
tables (triton/paro_rotate.build_tables: the same prologue as paroquant int4) and reserves the
split-K scratch (here, at load time, never inside CUDA-graph capture). `forward(layer, x)` = the
prologue launch (PLAIN fp16 for W4A16; ROT32 then mxfp4_gemm.quant_fp8 for W4A8) + one GEMM launch,
the kind and tile chosen by M from the table below.

| M | kind | tile (BM x BN, warps, stages) |
|---|---|---|
| 1..8 | `deqt` split-K (weights on the MMA's M side) | 16 x 32, 2, 3; split to ~64 programs per SM, <= 8 |
| 9..16 | `deqt` split-K | 16 x 64, 2, 3; ~32 programs per SM, <= 16 |
| 17..64 (RADIANCE_PQ_DECODE_MAX_M) | `deqt` split-K | 32 / 64 x 64, 4, 3; ~16 programs per SM, <= 8 |
| above, sm_90, <= MID_MAX_M | `deq` | N >= WIDE_N: 64 x 128, 4, 3, split to ~8 programs per SM; narrower: 128 x 256, 8, 3, split to ~1 per SM |
| above | `deq` | 128 x 128, 8 warps, 3 stages on sm_90 and 2 on sm_8x; no split unless the tiles leave the GPU half idle |

In each every split leaves >= 4 chunks (256 k) per program (prefill: 8). The decode and sm_90
mid-band rows are the H200 sweep of this kernel (docs/perf.md); sm_8x (unmeasured) runs the same
decode rows. Shared-memory and register fits come from the offline SASS check
(kernels/tests/test_offline_compile_mxfp4.py): sm_75's tl.dot runs on FMA with both operands in
registers, so sm_75 keeps paroquant's decode shapes (BM 16/32/64, BN 64, 4 warps, 8 at BM 64, 2
stages) and a 64 x 64 prefill tile on 8 warps; sm_86's 128 x 128 prefill tile spills on 3 stages,
not on 2; with the per-block e8m0 scaling (a second accumulator) 128 x 128 spills on sm_86 and
sm_90, so it runs 64 x 128 on sm_90 and 128 x 64 on sm_8x, its decode tiles on 2 stages on sm_8x.
W4A8 prefill keeps the 128 x 128 tile (unswept). The kernels per row count come from `KERNELS`
(kernels/registry.py): `deqt` in the decode band, `deq` above.
A merged layer (P rotated copies) halves BN until every partition boundary is a multiple of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig, needs_card
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.linear import PreparedLinear, Rotation, Run, kernel_bounds, single_run
from radiance.kernels.paro_table import SMEM_LIMIT, smem_limit  # noqa: F401 -- the cards' limits, one home
from radiance.kernels.paro_table import fit_tile as paro_fit_tile
from radiance.kernels.registry import ROWS_MAX, KernelSpec, Target
from radiance.kernels.triton import mxfp4_gemm, paro_producers, paro_rotate

BOUND_ALIGN = 128  # partition boundaries: multiples of this (an n-block must not straddle two rotations)
MID_MAX_M = 512  # sm_90 prefill rows up to this take the swept mid-band tiles (prefill_tile)
WIDE_N = 8192  # ... 64 x 128 on layers at least this wide, 128 x 256 below
KERNELS = registry.register([  # priority order: the split-K GEMM in the decode band, the tiled one above
    KernelSpec("paroquant_mxfp4.deqt", "cuda", lambda t: (1, t.decode_max_m)),
    KernelSpec("paroquant_mxfp4.deq", "cuda", lambda t: (t.decode_max_m + 1, ROWS_MAX)),
])


@dataclass(frozen=True)
class Tile:
    bm: int  # rows of x per program
    bn: int  # output columns per program
    warps: int
    stages: int
    split: int = 1  # K split (decode): chunks of 64 per program = ceil(C / split)
    kind: str = "deqt"  # "deqt" (decode) | "deq" (prefill): mxfp4_gemm.gemm


@dataclass
class Scratch:
    part: torch.Tensor  # fp32 split-K partials
    cnt: torch.Tensor  # int32 tickets, self-resetting


_SCRATCH: dict[torch.device, Scratch] = {}


def reserve_scratch(device: torch.device, part_elems: int, cnt_elems: int = 1 << 16) -> Scratch:
    """Grow the per-device split-K scratch to at least these sizes. Call at load time: allocating
    inside CUDA-graph capture would bake a transient address into the graph, so that is refused."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # the key tensors' devices have: cuda:<index>
        device = torch.device("cuda", torch.cuda.current_device())
    cur = _SCRATCH.get(device)
    if cur is not None and cur.part.numel() >= part_elems and cur.cnt.numel() >= cnt_elems:
        return cur
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("mxfp4 scratch must be reserved before CUDA-graph capture (prepare the layers first)")
    part = max(part_elems, cur.part.numel() if cur else 0, 1)
    cnt = max(cnt_elems, cur.cnt.numel() if cur else 0)
    s = Scratch(torch.empty(part, dtype=torch.float32, device=device), torch.zeros(cnt, dtype=torch.int32, device=device))
    _SCRATCH[device] = s
    return s


@dataclass(kw_only=True)
class Mxfp4Layer(paro_rotate.RotatedLayer):
    """One prepared paroquant_mxfp4 linear (P <= 3 distinct rotations merged along N)."""

    wb: torch.Tensor  # [K/64, N, 32] uint8 (mxfp4_gemm.repack)
    ex: torch.Tensor  # [K/32, N] uint8, per (block, column): the multiplier's exponent field (or e8m0)
    rsc: torch.Tensor  # [N] fp32, the column's power of two (1 with per_block)
    per_block: bool  # e8m0 scales applied per K = 32 partial dot (mxfp4_gemm: the fold's window does not hold)
    fp8: bool = False  # W4A8: e4m3 activations per (row, 128-group), sm_89+


def smem_bytes(t: Tile, act_bytes: int = 2) -> int:
    """Shared memory a tile asks for (estimate): the pipelined weight bytes, block exponents and
    activations per stage, plus a dequantized weight chunk staged once."""
    return t.stages * (t.bn * 34 + t.bm * 64 * act_bytes) + t.bn * 64 * act_bytes


def fit_tile(t: Tile, limit: int, act_bytes: int = 2) -> Tile:
    """paro_table.fit_tile by this kernel's shared memory, BN down to 32."""
    return paro_fit_tile(t, limit, act_bytes, smem_bytes, 32, "mxfp4")


def decode_tile(m: int, n: int, chunks: int, sms: int, cap: tuple[int, int], per_block: bool = False) -> Tile:
    """Split-K `deqt` for the decode band (module docstring's table; the H200 sweep), >= 4 chunks
    (256 k) per program."""
    if cap < (8, 0):  # FMA dots: BM 64 spills on 4 warps (module docstring); paroquant's shapes
        bm = min(64, max(16, triton.next_power_of_2(m)))
        t, per_sm, most = Tile(bm, 64, 8 if bm == 64 else 4, 2, 1, "deqt"), 8 if bm == 64 else 16, 8
    elif m <= 8:
        t, per_sm, most = Tile(16, 32, 2, 3, 1, "deqt"), 64, 8
    elif m <= 16:
        t, per_sm, most = Tile(16, 64, 2, 3, 1, "deqt"), 32, 16
    else:
        t, per_sm, most = Tile(32 if m <= 32 else 64, 64, 4, 3, 1, "deqt"), 16, 8
    if per_block and (8, 0) <= cap < (9, 0):
        t = replace(t, stages=2)  # sm_86 per-block: 3 stages spill (module docstring)
    tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
    t = replace(t, split=max(1, min(chunks // 4, most, triton.cdiv(per_sm * sms, tiles))))
    return fit_tile(t, smem_limit(cap))


def prefill_tile(m: int, n: int, chunks: int, sms: int, cap: tuple[int, int], fp8: bool = False,
                 per_block: bool = False) -> Tile:
    """`deq` above the decode band (module docstring's table), fitted to the card's shared memory,
    split-K (at most 8 ways, >= 8 chunks per program) where the tiles leave the GPU short."""
    if cap >= (9, 0) and not (fp8 or per_block) and m <= MID_MAX_M:  # the H200 sweep
        if n >= WIDE_N:
            t = Tile(64, 128, 4, 3, 1, "deq")
            tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
            return replace(t, split=max(1, min(8, chunks // 8, triton.cdiv(8 * sms, tiles))))
        t = Tile(128, 256, 8, 3, 1, "deq")
        tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
        return replace(t, split=max(1, min(8, chunks // 8, sms // tiles)))
    if cap >= (9, 0):
        t = Tile(64 if per_block else 128, 128, 8, 3, 1, "deq")
    elif cap >= (8, 0):
        t = Tile(128, 64 if per_block else 128, 8, 2, 1, "deq")
    else:
        t = Tile(64, 64, 8, 2, 1, "deq")
    t = fit_tile(t, smem_limit(cap), 1 if fp8 else 2)
    tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
    return replace(t, split=max(1, min(8, chunks // 8, 2 * sms // tiles)))


def _split_partials(layer: "Mxfp4Layer") -> int:
    """The fp32 partial slots the table's split-K tiles need at the worst M (reserved at prepare)."""
    most, m = 0, 1
    while True:
        t = tile_for(layer, m)
        if t.split > 1:
            most = max(most, t.split * m * layer.n)
        if m > max(layer.decode_max_m, MID_MAX_M) and t.split == 1:
            return most  # within the last band the split only shrinks as M grows
        m = m + 1 if m <= layer.decode_max_m else triton.cdiv(m + 1, t.bm) * t.bm  # each row-block count's largest M


def use_fp8(cap: tuple[int, int], config: KernelConfig) -> bool:
    """RADIANCE_MXFP4_FP8: W4A8 (fp8 activations) instead of W4A16, on cards with fp8 tensor-core dots."""
    return needs_card("RADIANCE_MXFP4_FP8", config.mxfp4_fp8, cap, (8, 9), "fp8 tensor-core dots", "W4A16")


def prepare(weight: torch.Tensor, weight_scale: torch.Tensor, rotations: list[Rotation], runs: list[Run] | None = None,
            bias: torch.Tensor | None = None, cap: tuple[int, int] | None = None, fp8: bool | None = None,
            per_block: bool | None = None, config: KernelConfig | None = None) -> Mxfp4Layer:
    """Checkpoint tensors of one linear: weight [N, K/2] u8 / weight_scale [N, K/32] u8 (the
    partitions concatenated along N), its distinct rotations and their runs of output columns
    (kernels/linear.py; default: one rotation over every column; boundaries multiples of
    BOUND_ALIGN). cap: the GPU capability the tiles are chosen for (default: the device's). fp8:
    W4A8 (sm_89+; None: RADIANCE_MXFP4_FP8). per_block: force (True) or refuse (False) the per-block e8m0 scaling; None picks
    the fold wherever it is exact (mxfp4_gemm). `config`: the knobs (default: as the environment sets them now)."""
    config = config or KernelConfig.from_knobs()
    device = weight.device
    dcap, sms = gpu.tile_target(device)
    cap = cap or dcap
    fp8 = use_fp8(cap, config) if fp8 is None else fp8
    if fp8 and cap < (8, 9):
        raise ValueError(f"mxfp4 W4A8 needs fp8 tensor-core dots (sm_89+); this GPU is sm_{cap[0]}{cap[1]}")
    n, k = int(weight.shape[0]), int(weight.shape[1]) * 2
    bounds = kernel_bounds("mxfp4", runs or single_run(n), rotations, n, k, BOUND_ALIGN)
    wb, ex, rsc, pb = mxfp4_gemm.repack(weight, weight_scale, fp8, per_block)
    target = Target.of("paroquant_mxfp4", "cuda", n, k, config, cap)
    layer = Mxfp4Layer(wb=wb.to(device), ex=ex.to(device), rsc=rsc.to(device), tables=paro_rotate.build_tables(rotations, device),
                       bounds=bounds, n=n, k=k, cap=cap, sms=sms, decode_max_m=target.decode_max_m,
                       kernels=registry.choose(KERNELS, target), per_block=pb, fp8=fp8, bias=bias)
    # tickets: one per output tile of a split-K launch (decode: <= 4 row blocks of BN >= 32; prefill
    # splits only when its tiles number <= 2 * sms)
    reserve_scratch(device, _split_partials(layer), max(1 << 16, 4 * triton.cdiv(n, 32), 2 * sms))
    return layer


def tile_for(layer: Mxfp4Layer, m: int) -> Tile:
    """The table's tile for M rows of this layer (cached per M in the decode band, per row-block
    count above)."""
    if layer.kernels.spec(m).kernel == "deqt":
        key = ("d", m)
    else:
        base = prefill_tile(m, layer.n, 1, layer.sms, layer.cap, layer.fp8, layer.per_block)
        key = ("p", base.bm, base.bn, triton.cdiv(m, base.bm))  # the band's tile, its row blocks
    t = layer.tiles.get(key)
    if t is None:
        chunks = layer.k // mxfp4_gemm.CHUNK
        t = decode_tile(m, layer.n, chunks, layer.sms, layer.cap, layer.per_block) if key[0] == "d" \
            else prefill_tile(m, layer.n, chunks, layer.sms, layer.cap, layer.fp8, layer.per_block)
        while layer.straddles(t.bn):
            t = replace(t, bn=t.bn // 2)
            if t.split > 1 and key[0] == "p":  # more n-blocks: the split that fills the GPU shrinks
                tiles = triton.cdiv(m, t.bm) * triton.cdiv(layer.n, t.bn)
                t = replace(t, split=max(1, min(t.split, 2 * layer.sms // tiles)))
        layer.tiles[key] = t
    return t


def rotate(layer: Mxfp4Layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The prologue: x [M, K] -> (rotated activations [P, M, K] in the GEMM's input format, their
    per (row, 128-group) scales for W4A8, else None)."""
    return _formatted(layer, lambda tables, mode, trigger: paro_rotate.rotate(x, tables, mode))


def _formatted(layer: Mxfp4Layer, prologue) -> tuple[torch.Tensor, torch.Tensor | None]:
    # prologue(tables, mode, trigger) writes the rotated activations (a plain prologue or a producer)
    if layer.fp8:
        a32, _, _ = prologue(layer.tables, paro_rotate.ROT32, False)
        return mxfp4_gemm.quant_fp8(a32)
    a, _, _ = prologue(layer.tables, paro_rotate.PLAIN, False)
    return a, None


def gemm_rotated(layer: Mxfp4Layer, a: torch.Tensor, s: torch.Tensor | None, out_dtype: torch.dtype, t: Tile,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] (+ bias) from the prologue's outputs."""
    layer.check_partitions("mxfp4", a)
    scr = _SCRATCH.get(a.device)
    if scr is None:
        raise RuntimeError(f"mxfp4: no scratch reserved on {a.device}; prepare the layer on the device it runs on")
    y = torch.empty(a.shape[1], layer.n, dtype=out_dtype, device=a.device)
    return mxfp4_gemm.gemm(t.kind, a, s, layer.wb, layer.ex, layer.rsc, y, bm=t.bm, bn=t.bn, split=t.split,
                           pb1=layer.bounds[0], pb2=layer.bounds[1], per_block=layer.per_block, part=scr.part,
                           cnt=scr.cnt, num_warps=t.warps, num_stages=t.stages, bias=bias)


def forward(layer: Mxfp4Layer, x: torch.Tensor, bias: torch.Tensor | None = None, tile: Tile | None = None) -> torch.Tensor:
    """y [M, N] = the layer applied to x [M, K] (bf16 / fp16 / fp32, y in x's dtype), plus `bias`
    (else the layer's own), added in fp32 before the output's one rounding. `tile` overrides the
    table (tests, sweeps)."""
    bias = layer.bias if bias is None else bias
    if x.dim() != 2 or x.shape[1] != layer.k:
        raise ValueError(f"mxfp4: expected input [M, {layer.k}], got {list(x.shape)}")
    m = x.shape[0]
    if m == 0:  # an empty batch launches nothing (a zero-sized grid is an error for Triton)
        return x.new_empty(0, layer.n)
    t = tile or tile_for(layer, m)
    a, s = rotate(layer, x)
    return gemm_rotated(layer, a, s, x.dtype, t, bias)


def forward_produced(layer: Mxfp4Layer, producer, bias: torch.Tensor | None = None) -> torch.Tensor:
    """forward(layer, the producer's output), its producer fused with the rotation in the decode
    band (kernels/producers.py), unfused above it."""
    if not paro_producers.in_band(producer):
        return forward(layer, producer.plain(), bias=bias)
    a, s = _formatted(layer, producer.rotated)
    return gemm_rotated(layer, a, s, producer.dtype, tile_for(layer, producer.rows),
                        layer.bias if bias is None else bias)


# ----------------------------------------------------------------------------- the ("paroquant_mxfp4", "cuda")
# entry of kernels/methods/paroquant_mxfp4.py: a PreparedLinear's payload is this module's Mxfp4Layer
def prepare_linear(prep: PreparedLinear, t: Mxfp4Tensors) -> None:
    prep.data["mxfp4"] = prepare(t.weight, t.weight_scale, prep.rotations, prep.runs,  # type: ignore[assignment]
                                 config=prep.config)


def forward_linear(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return forward(prep.data["mxfp4"], x, bias=bias)  # type: ignore[arg-type]


def produced_linear(prep: PreparedLinear, producer, bias: torch.Tensor | None) -> torch.Tensor:
    return forward_produced(prep.data["mxfp4"], producer, bias=bias)  # type: ignore[arg-type]
