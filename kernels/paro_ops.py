"""Per-layer paroquant ops on NVIDIA (Triton): prepare once from checkpoint tensors, then forward.

No vLLM here. `prepare` lays out the weights (triton/paro_gemm.repack), builds the rotation tables
(triton/paro_rotate.build_tables) and reserves the split-K / dequant scratch (kernels/nvidia/pool.py,
at load time, never inside CUDA-graph capture). `forward(layer, x)` = prologue launch + GEMM launch
(or the scratch path), the kind planned at prepare from kernels/nvidia/paroquant's `KERNELS`
(kernels/registry.py), its tile and launch that kind module's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors
from radiance.kernels.linear import PreparedLinear, Rotation, Run, kernel_bounds, single_run
from radiance.kernels.nvidia import paroquant as kinds
from radiance.kernels.nvidia import pool
from radiance.kernels.nvidia.paroquant import (  # noqa: F401 -- the kinds' names, re-exported: callers say ops.Tile
    KERNELS, TURING_GEMV_MAX_M, W4A16_ONLY, WGMMA_BT128_MAX_M, WGMMA_MAX_M, Tile, decode_tile, fit_tile,
    launches_dependent, prefill_tile, prologue_mode, smem_bytes, stream_tile, use_int8)
from radiance.kernels.nvidia.tile import smem_limit  # noqa: F401
from radiance.kernels.pdl import enabled as pdl_enabled
from radiance.kernels.triton import paro_gemm, paro_producers, paro_rotate


@dataclass(kw_only=True)
class ParoLayer(paro_rotate.RotatedLayer):
    """One prepared paroquant linear (P <= 3 distinct rotations merged along N)."""

    wb: torch.Tensor  # [G, N, 64] uint8
    sc: torch.Tensor  # [G, N] f16
    d: torch.Tensor  # [G, N] int8 (zero point - 8)
    i8: bool
    scratch_rows: int = 0  # scratch path: weight rows dequantized per piece, 0 = all at once (RADIANCE_PQ_SCRATCH_ROWS)
    pdl: bool = False  # decode GEMMs may launch dependent on their prologue (kernels/pdl.py; the table says which)


def prepare(qweights: list[torch.Tensor], qzeros: list[torch.Tensor], scales: list[torch.Tensor],
            rotations: list[Rotation], runs: list[Run] | None = None,
            bias: torch.Tensor | None = None, cap: tuple[int, int] | None = None, only: str | None = None,
            config: KernelConfig | None = None) -> ParoLayer:
    """Checkpoint tensors of one linear (lists: one entry per weight piece, concatenated along N),
    its distinct rotations and their runs of output columns (kernels/linear.py; default: one
    rotation over every column). `only`: plan that kernel (e.g. "paroquant.deqt") on every row it
    takes (benchmarks, tests). `config`: the knobs (default: as the environment sets them now)."""
    config = config or KernelConfig.from_knobs()
    device = qweights[0].device
    dcap, sms = gpu.tile_target(device)
    on_gpu = gpu.capability(device) is not None
    cap = cap or dcap
    i8 = use_int8(cap, config)
    wb, sc, d = paro_gemm.repack(qweights, qzeros, scales)
    g, n, _ = wb.shape
    k = g * GROUP_SIZE
    bounds = kernel_bounds("paroquant", runs or single_run(n), rotations, n, k, 128)
    target = registry.Target.of("paroquant", "cuda", n, k, config, cap, i8)
    layer = ParoLayer(wb=wb.to(device), sc=sc.to(device), d=d.to(device), tables=paro_rotate.build_tables(rotations, device),
                      bounds=bounds, n=n, k=k, cap=cap, sms=sms, decode_max_m=target.decode_max_m, i8=i8,
                      kernels=registry.choose(KERNELS, target, only), bias=bias, scratch_rows=config.scratch_rows,
                      # the real GPU's capability: a faked one (the sm_75 configs run on the H200) never asks for it
                      pdl=on_gpu and pdl_enabled(dcap, config.pdl) and cap >= (9, 0))
    decode = [m for m in range(1, layer.decode_max_m + 1) if layer.kernels.covers(m)]
    part = max((tile_for(layer, m).split * m * n for m in decode if kinds.KINDS[kind_for(layer, m)].launch),
               default=0)
    scratch = any(s.kernel == kinds.scratch.NAME for _, _, s in layer.kernels.pieces)
    pool.reserve(device, part, kinds.scratch.deq_elems(n, k, layer.scratch_rows, device) if scratch else 0,
                 what="paroquant")
    return layer


def check_partitions(layer: ParoLayer, a: torch.Tensor) -> None:
    layer.check_partitions("paroquant", a)


def kind_for(layer: ParoLayer, m: int) -> str:
    """The kernel the layer's plan runs M rows on."""
    return layer.kernels.spec(m).kernel


def with_kernel(layer: ParoLayer, kernel: str) -> ParoLayer:
    """A copy of the layer whose plan runs every row on one kernel of KERNELS (benchmarks
    pair it against the layer's own plan; its scratch must be reserved by the caller)."""
    spec = next((s for s in KERNELS if s.kernel == kernel), None)
    if spec is None:
        raise ValueError(f"paroquant: no kernel {kernel!r}; the registry has {sorted({s.kernel for s in KERNELS})}")
    return replace(layer, kernels=registry.Plan([(1, registry.ROWS_MAX, spec)]), tiles={})


def tile_for(layer: ParoLayer, m: int, kind: str | None = None) -> Tile:
    """The tile of `kind` (default: the planned kernel) for M rows of this layer."""
    kind = kind or kind_for(layer, m)
    decode = m <= layer.decode_max_m and kinds.KINDS[kind].decode_tile is not None
    key = (kind, m) if decode else (kind, m <= WGMMA_BT128_MAX_M)
    t = layer.tiles.get(key)
    if t is None:
        t = decode_tile(kind, m, layer.n, layer.k // GROUP_SIZE, layer.sms, layer.cap, layer.i8) if decode \
            else prefill_tile(kind, layer.cap, m)
        if layer.parts > 1:
            while layer.straddles(t.bn):
                t = replace(t, bn=t.bn // 2)
        layer.tiles[key] = t
    return t


def gemm_rotated(layer: ParoLayer, a: torch.Tensor, s: torch.Tensor | None, rs: torch.Tensor | None,
                 out_dtype: torch.dtype, t: Tile, bias: torch.Tensor | None = None, pdl: bool = False) -> torch.Tensor:
    """y [M, N] (+ bias) from prologue outputs (a [P, M, K] in the format `t.kind` reads,
    s/rs [P, M, G]). pdl: launched dependent on the prologue just before it (which triggered)."""
    check_partitions(layer, a)
    if t.kind == "mma_gl" and layer.cap < (8, 0):
        raise ValueError(f"paroquant mma_gl needs sm_80+ (cp.async / mma.sync m16n8k16); this GPU is "
                         f"sm_{layer.cap[0]}{layer.cap[1]}: use gemv_gl")
    m = a.shape[1]
    y = torch.empty(m, layer.n, dtype=out_dtype, device=a.device)
    scr = pool.get(a.device, "paroquant")
    return kinds.gemm(a, s, rs, layer.wb, layer.sc, layer.d, y, t, pb1=layer.bounds[0], pb2=layer.bounds[1],
                      part=scr.part, cnt=scr.cnt, bias=bias, programs=t.persist * layer.sms, pdl=pdl)


def forward(layer: ParoLayer, x: torch.Tensor, tile: Tile | None = None,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] = the layer applied to x [M, K] (bf16 / fp16 / fp32), plus `bias` (else the
    layer's own), added in fp32 before the output's rounding (the scratch path rounds to fp16 in
    cuBLAS, then to x's dtype). An explicit `tile` runs that Triton GEMM whatever the plan says
    (benchmarks, tests)."""
    bias = layer.bias if bias is None else bias
    if x.dim() != 2 or x.shape[1] != layer.k:
        raise ValueError(f"paroquant: expected input [M, {layer.k}], got {list(x.shape)}")
    m = x.shape[0]
    if m == 0:  # an empty batch launches nothing (a zero-sized grid is an error for Triton)
        return x.new_empty(0, layer.n)
    kind = None if tile else kind_for(layer, m)  # `tile` overrides the plan (benchmark sweeps, tests)
    if kind is not None and kinds.KINDS[kind].launch is None:  # a kind with its own forward (the scratch path)
        return kinds.KINDS[kind].forward(layer, x, bias)
    return _gemm_after(layer, m, x.dtype, lambda tables, mode, dep: paro_rotate.rotate(x, tables, mode, trigger=dep),
                       bias, tile or tile_for(layer, m, kind))


def fuses(layer: ParoLayer, producer) -> bool:
    """Whether the producer's rows run fused (kernels/producers.py): in its band
    (paro_producers.FUSED_MAX_M), on a kernel that reads the prologue's output (the scratch path
    reads the activations themselves)."""
    return paro_producers.in_band(producer) and kinds.KINDS[kind_for(layer, producer.rows)].MODE is not None


def forward_produced(layer: ParoLayer, producer, bias: torch.Tensor | None = None) -> torch.Tensor:
    """forward(layer, the producer's output): in one producer kernel and the GEMM where `fuses`,
    else the producer's unfused ops, then forward."""
    if not fuses(layer, producer):
        return forward(layer, producer.plain(), bias=bias)
    m = producer.rows
    return _gemm_after(layer, m, producer.dtype, producer.rotated, layer.bias if bias is None else bias,
                       tile_for(layer, m))


def _gemm_after(layer: ParoLayer, m: int, dtype: torch.dtype, prologue, bias: torch.Tensor | None,
                t: Tile) -> torch.Tensor:
    """The GEMM on tile t after `prologue(tables, mode, trigger)` wrote its input."""
    if layer.i8 and t.kind in W4A16_ONLY:
        raise ValueError(f"paroquant: the {t.kind} kind is W4A16 only (RADIANCE_PQ_I8=1 asks for W4A8)")
    dep = layer.pdl and launches_dependent(t)
    a, s, rs = prologue(layer.tables, prologue_mode(t.kind, layer.i8), dep)
    return gemm_rotated(layer, a, s, rs, dtype, t, bias, pdl=dep)


# ----------------------------------------------------------------------------- the ("paroquant", "cuda") entry
# of kernels/methods/paroquant.py: a PreparedLinear's payload is this module's ParoLayer
def prepare_linear(prep: PreparedLinear, t: ParoTensors) -> None:
    prep.data["paro"] = prepare([t.qweight], [t.qzeros], [t.scales], prep.rotations, prep.runs,  # type: ignore[assignment]
                                config=prep.config)


def forward_linear(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return forward(prep.data["paro"], x, bias=bias)  # type: ignore[arg-type]


def produced_linear(prep: PreparedLinear, producer, bias: torch.Tensor | None) -> torch.Tensor:
    return forward_produced(prep.data["paro"], producer, bias=bias)  # type: ignore[arg-type]
