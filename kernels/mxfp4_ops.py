"""Per-layer paroquant_mxfp4 (MXFP4-PARO) ops on NVIDIA (Triton): prepare once from checkpoint
tensors, then forward -- paro_ops' API shape, so it registers as a ("paroquant_mxfp4", "cuda") kernel.

`prepare` lays out the e2m1 weights and e8m0 scales (triton/mxfp4_gemm.repack), builds the rotation
tables (triton/paro_rotate.build_tables: the same prologue as paroquant int4) and reserves the
split-K scratch (kernels/nvidia/pool.py, at load time, never inside CUDA-graph capture).
`forward(layer, x)` = the prologue launch (PLAIN fp16 for W4A16; ROT32 then mxfp4_gemm.quant_fp8 for
W4A8) + one GEMM launch, the kind planned per row count from kernels/nvidia/mxfp4's `KERNELS`
(kernels/registry.py), its tile that kind module's. A merged layer (P rotated copies) halves BN
until every partition boundary is a multiple of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig, needs_card
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.linear import PreparedLinear, Rotation, Run, kernel_bounds, single_run
from radiance.kernels.nvidia import pool
from radiance.kernels.nvidia.mxfp4 import KERNELS, KINDS, deq, deqt, fit_tile, smem  # noqa: F401 -- re-exported
from radiance.kernels.nvidia.mxfp4.deq import MID_MAX_M, WIDE_N  # noqa: F401
from radiance.kernels.nvidia.tile import Tile  # noqa: F401 -- callers say ops.Tile
from radiance.kernels.registry import Target
from radiance.kernels.triton import mxfp4_gemm, paro_producers, paro_rotate

BOUND_ALIGN = 128  # partition boundaries: multiples of this (an n-block must not straddle two rotations)
smem_bytes = smem
decode_tile = deqt.tile
prefill_tile = deq.tile


@dataclass(kw_only=True)
class Mxfp4Layer(paro_rotate.RotatedLayer):
    """One prepared paroquant_mxfp4 linear (P <= 3 distinct rotations merged along N)."""

    wb: torch.Tensor  # [K/64, N, 32] uint8 (mxfp4_gemm.repack)
    ex: torch.Tensor  # [K/32, N] uint8, per (block, column): the multiplier's exponent field (or e8m0)
    rsc: torch.Tensor  # [N] fp32, the column's power of two (1 with per_block)
    per_block: bool  # e8m0 scales applied per K = 32 partial dot (mxfp4_gemm: the fold's window does not hold)
    fp8: bool = False  # W4A8: e4m3 activations per (row, 128-group), sm_89+


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
    pool.reserve(device, _split_partials(layer), tickets=max(pool.TICKETS, 4 * triton.cdiv(n, 32), 2 * sms),
                 what="mxfp4")
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
    scr = pool.get(a.device, "mxfp4")
    y = torch.empty(a.shape[1], layer.n, dtype=out_dtype, device=a.device)
    return KINDS[t.kind].launch(layer, a, s, y, t, scr.part, scr.cnt, bias)


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
