"""Per-layer pq2 ops on NVIDIA (Triton): prepare the weights once after loading, then forward.

No vLLM here: the plugin calls `prepare` / `forward` / `skinny_linear`; the benchmark and the gpu
tests call them directly. The kernel per row count is planned at prepare from `pq2_table.KERNELS`
(kernels/registry.py), its tile comes from `pq2_table`, the kernels from `triton/pq2_*`.

Launch cost: prefill runs outside CUDA graphs, where Triton's Python launcher (argument binding,
specialization keys) costs tens of µs per kernel. Each layer caches a launch plan per
(kernel, tile, argument-alignment key): the compiled kernel, called directly after its first launch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import triton

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig
from radiance.kernels import pq2_table as table
from radiance.kernels.formats.pq2 import Pq2Tensors
from radiance.kernels.launch import INTERPRET, Launch
from radiance.kernels.linear import PreparedLinear
from radiance.kernels.pdl import enabled as pdl_enabled
from radiance.kernels.pq2_prefill import run_gluon_wgmma, run_gluon_ws
from radiance.kernels.producers import AddRmsNorm, Producer, SiluMul
from radiance.kernels.triton.pq2_common import ROW_BLOCK, reduce_splits
from radiance.kernels.triton.pq2_gemv import pq2_gemv_dp4a
from radiance.kernels.triton.pq2_legacy import pq2_legacy_gemm
from radiance.kernels.triton.pq2_planes import pq2_planes_gemm
from radiance.kernels.triton.pq2_quant import GROUP, _quant_groups, quant_grid
from radiance.kernels.triton.pq2_skinny import skinny_splitk_gemm
from radiance.kernels.triton.split_finish import stream_programs

QUANT_GB = 4  # groups per quantization program
# Rows the fused producers take (forward_produced). Each quantizer program reads its row once more
# for the norm's sum of squares, K / (128 QUANT_GB) programs per row (paroquant's prologue reads it
# once per group and rotated copy); on the H200 the norm and the silu-mul producer each beat the
# unfused op + quantizer at M = 1, 4 and 16 (bench/bench_producers.py --sites), unmeasured above
PRODUCER_MAX_M = 16
FUSED_MAX_M = {"norm": PRODUCER_MAX_M, "silu_mul": PRODUCER_MAX_M}  # per producer kind (both fused alike)
REDUCE_BLOCK = 1024


@dataclass
class Pq2Layer:
    """Prepared weights of one pq2 linear, and its launch plans."""

    qweight: torch.Tensor  # [N/128, G, 128, 32] uint8 (rows padded to 128; pq2_common.block_row)
    scales: torch.Tensor  # [N, K/128] f16
    n: int
    k: int
    kernels: registry.Plan  # rows -> kernel (pq2_table.KERNELS), chosen at prepare
    exact: bool = False  # bit-identical kernels only, no split-K (a test fixture)
    pdl: bool = False  # decode GEMMs may launch dependent on the quantizer (kernels/pdl.py; PDL_PATHS say which)
    plans: dict = field(default_factory=dict)

    @property
    def qweight32(self) -> torch.Tensor:  # the same bytes as int32 words
        return self.qweight.view(torch.int32)

    def plan(self, key, make) -> Launch:
        p = self.plans.get(key)
        if p is None:
            p = self.plans[key] = make()
        return p


def prepare(qweight: torch.Tensor, scales: torch.Tensor, exact: bool = False, only: str | None = None,
            cap: tuple[int, int] | None = None, config: KernelConfig | None = None) -> Pq2Layer:
    """Check and lay out one layer's weights for the kernels (once, after loading) and plan its
    kernels. `exact`: only kernels bit-identical to legacy, without split-K (tests); `only`: that
    kernel (e.g. "pq2.legacy") on every row it takes (benchmarks, tests); `cap`: plan as on that
    capability (the sm_86 / sm_75 choices run on the H200 in the GPU tests); `config`: the knobs
    (default: as the environment sets them now)."""
    config = config or KernelConfig.from_knobs()
    if qweight.dtype != torch.uint8 or qweight.dim() != 2:
        raise ValueError(f"pq2 qweight must be [N, K/4] uint8, got {tuple(qweight.shape)} {qweight.dtype}")
    n, k = qweight.shape[0], qweight.shape[1] * 4
    if k % GROUP:
        raise ValueError(f"pq2 K={k} is not a multiple of {GROUP}")
    if tuple(scales.shape) != (n, k // GROUP):
        raise ValueError(f"pq2 scales must be [N, K/128] = [{n}, {k // GROUP}], got {tuple(scales.shape)}")
    if scales.device != qweight.device:
        raise ValueError(f"pq2 qweight on {qweight.device} but scales on {scales.device}")
    if gpu.capability(qweight.device) and qweight.device not in _TICKETS:
        _TICKETS[qweight.device] = torch.zeros(TICKETS, dtype=torch.int32, device=qweight.device)
    rows = ROW_BLOCK.value
    blocks = -(-n // rows)
    padded = torch.zeros(blocks * rows, k // 4, dtype=torch.uint8, device=qweight.device)
    padded[:n] = qweight
    blocked = padded.view(blocks, rows, k // GROUP, 32).transpose(1, 2).contiguous()
    target = registry.Target.of("pq2", "cuda", n, k, config, cap or _capability(qweight.device), exact=exact)
    # the real GPU's capability: PDL only where the device has it (a faked cap never asks for it)
    pdl = gpu.capability(qweight.device) is not None and pdl_enabled(_capability(qweight.device), config.pdl)
    return Pq2Layer(blocked, scales.to(torch.float16).contiguous(), n, k, registry.choose(table.KERNELS, target, only),
                    exact, pdl)


# per device: the gluon path's split-K tickets (self-resetting: the last program of a tile zeroes
# its counter), allocated by prepare() because allocating during CUDA-graph capture is not allowed
_TICKETS: dict[torch.device, torch.Tensor] = {}
TICKETS = 1 << 16  # output tiles: lm_head (248320 rows) at 64 rows x 8 tokens is 7760


def _sms(device: torch.device) -> int:
    return gpu.sm_count(device) or 132


def _capability(device: torch.device) -> tuple[int, int]:
    # CPU (the interpreter tests) behaves like an sm_80+ part
    return gpu.capability(device) or (8, 0)


def quantize_activations(x2: torch.Tensor, planes: bool, layer: Pq2Layer | None = None, trigger: bool = False,
                         producer: Producer | None = None):
    """x [M, K] -> (q int8 [M, K] natural or plane order, a f32 [M, G], t int32 [M, G]).
    trigger: the GEMM launched next depends on it programmatically (kernels/pdl.py). producer: x is
    that op's output, computed in the same kernel (x2 its input: the norm's x, silu-mul's [gate | up])."""
    m = x2.shape[0]
    k = x2.shape[1] // 2 if isinstance(producer, SiluMul) else x2.shape[1]
    q = torch.empty((m, k), dtype=torch.int8, device=x2.device)
    a = torch.empty((m, k // GROUP), dtype=torch.float32, device=x2.device)
    t = torch.empty((m, k // GROUP), dtype=torch.int32, device=x2.device)
    src, has_res, norm_args = 0, False, (x2, x2, x2, 0.0, 0)  # R, W, RO, eps, stride_rm: unread unless a norm
    if isinstance(producer, SiluMul):
        src = 2
    elif isinstance(producer, AddRmsNorm):
        res = producer.residual
        src, has_res = 1, res is not None
        if has_res and (res.shape != x2.shape or res.stride(1) != 1):
            raise ValueError(f"pq2 producer: residual {tuple(res.shape)} strides {res.stride()} does not match x "
                             f"{tuple(x2.shape)} (row-major)")
        producer.residual_out = torch.empty_like(x2) if has_res else None
        norm_args = (res if has_res else x2, producer.weight, producer.residual_out if has_res else x2,
                     float(producer.eps), res.stride(0) if has_res else 0)
    # the compiled kernel is reused directly: key it on every alignment Triton specializes on
    aligned = tuple(p.data_ptr() % 16 == 0 for p in norm_args[:3]) + (norm_args[4] % 16 == 0,)
    key = ("quant", planes, x2.dtype, x2.data_ptr() % 16 == 0, x2.stride(0) % 16 == 0, trigger, src, has_res, aligned)

    def make():
        return Launch(_quant_groups, {"GB": QUANT_GB, "PLANES": planes, "HW_RINT": not INTERPRET, "TRIGGER": trigger,
                                       "SRC": src, "HAS_RES": has_res, "CHUNK": min(4096, triton.next_power_of_2(k)),
                                       "INTERPRET": INTERPRET}, 4, 1)

    launch = layer.plan(key, make) if layer is not None else make()
    launch(quant_grid(m, k, QUANT_GB), x2, q, a, t, m, k, x2.stride(0), *norm_args)
    return q, a, t


def forward(layer: Pq2Layer, x: torch.Tensor, path: str | None = None, tile: table.Tile | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """y = x W^T for a pq2 layer (x [..., K] fp16/bf16/fp32 -> y in x's dtype).

    `path` / `tile` force a choice (benchmarks, tests); by default the layer's plan decides.
    `out`: a contiguous [M, N] tensor of x's dtype to write into."""
    if x.shape[-1] != layer.k:
        raise ValueError(f"pq2 layer has K={layer.k}, input has last dim {x.shape[-1]}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, layer.k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    if out is None:
        y = torch.empty((m, layer.n), dtype=x.dtype, device=x.device)
    elif out.shape != (m, layer.n) or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError(f"pq2 out must be contiguous [{m}, {layer.n}] {x.dtype}, got {tuple(out.shape)} {out.dtype}")
    else:
        y = out
    if m == 0:
        return y.reshape(*lead, layer.n)
    _quantize_and_gemm(layer, x2, y, path, tile)
    return y.reshape(*lead, layer.n)


def forward_produced(layer: Pq2Layer, producer: Producer) -> torch.Tensor:
    """forward(layer, the producer's output), the producer computed inside the activation quantizer
    up to PRODUCER_MAX_M rows, else its unfused kernel, then forward."""
    if not 0 < producer.rows <= PRODUCER_MAX_M:
        return forward(layer, producer.plain())
    x2 = producer.x if isinstance(producer, AddRmsNorm) else producer.gu
    y = torch.empty((producer.rows, layer.n), dtype=producer.dtype, device=x2.device)
    _quantize_and_gemm(layer, x2, y, producer=producer)
    return y


def _quantize_and_gemm(layer: Pq2Layer, x2: torch.Tensor, y: torch.Tensor, path: str | None = None,
                       tile: table.Tile | None = None, producer: Producer | None = None) -> None:
    # the planned (or forced) kernel at y's rows: the quantizer (computing the producer), then the GEMM
    m = y.shape[0]
    path, tile = choose(layer, m, x2.device, path, tile)
    dep = launches_dependent(layer, path, m)
    q, a, t = quantize_activations(x2, planes=path != "legacy", layer=layer, trigger=dep, producer=producer)
    gemm_quantized(layer, path, tile, q, a, t, y, pdl=dep)


def choose(layer: Pq2Layer, m: int, device: torch.device, path: str | None = None,
           tile: table.Tile | None = None) -> tuple[str, table.Tile]:
    """The (path, tile) forward runs M rows on: the layer's plan and the tile table, unless forced."""
    path = path or layer.kernels.spec(m).kernel
    if tile is None:
        tile = table.tile_for(path, layer.n, layer.k, m, _sms(device), not layer.exact, gpu.arch(device))
    return path, tile


def launches_dependent(layer: Pq2Layer, path: str, m: int) -> bool:
    """Whether `path`'s GEMM at M rows launches dependent on the quantizer before it (on the layer's device)."""
    return layer.pdl and path in table.PDL_PATHS and m <= table.SMALL_MAX_M


def gemm_quantized(layer: Pq2Layer, path: str, tile: table.Tile, q: torch.Tensor, a: torch.Tensor, t: torch.Tensor,
                   y: torch.Tensor, pdl: bool = False) -> None:
    """y [M, N] from quantize_activations' outputs (plane order for every path but legacy): the
    GEMM launch(es) alone (forward's second half; bench/floor.py times it apart). pdl: launched
    dependent on the quantizer just before it (which triggered; launches_dependent)."""
    m = q.shape[0]
    if pdl and path not in table.PDL_PATHS:
        raise table.Pq2ConfigError(f"pq2 {path}: only {', '.join(table.PDL_PATHS)} launch dependent on the quantizer")
    run = LAUNCHERS.get(path)
    if run is None:
        raise table.Pq2ConfigError(f"unknown pq2 path {path!r}: use one of {', '.join(LAUNCHERS)}")
    run(layer, q, a, t, y, m, tile, pdl) if path in table.PDL_PATHS else run(layer, q, a, t, y, m, tile)


def _reduce(layer: Pq2Layer, p: torch.Tensor, y: torch.Tensor, splits: int) -> None:
    mn = y.numel()
    launch = layer.plan(("reduce", splits, y.dtype),
                        lambda: Launch(reduce_splits, {"SPLITS": splits, "BLOCK": REDUCE_BLOCK}, 4, 1))
    launch((triton.cdiv(mn, REDUCE_BLOCK),), p, y, mn)


def _run_legacy(layer, q, a, t, y, m, tile: table.Tile) -> None:
    launch = layer.plan(("legacy", tile, y.dtype),
                        lambda: Launch(pq2_legacy_gemm, {"BM": tile.bt, "BN": tile.bn}, tile.warps, tile.stages,
                                        tile.maxnreg))
    grid = (triton.cdiv(layer.n, tile.bn), triton.cdiv(m, tile.bt))
    launch(grid, q, a, layer.qweight, layer.scales, y, m, layer.n, layer.k)


def _run_planes(layer, q, a, t, y, m, tile: table.Tile) -> None:
    p = y if tile.splits == 1 else torch.empty((tile.splits, m, layer.n), dtype=torch.float32, device=y.device)
    launch = layer.plan(("planes", tile, y.dtype), lambda: Launch(
        pq2_planes_gemm, {"BN": tile.bn, "BT": tile.bt, "SPLITS": tile.splits, "STAGES": tile.stages,
                          "ONE_DOT": tile.one_dot, "ASM": not INTERPRET, "EVEN_N": layer.n % tile.bn == 0},
        tile.warps, tile.stages, tile.maxnreg))
    grid = (triton.cdiv(layer.n, tile.bn), triton.cdiv(m, tile.bt), tile.splits)
    launch(grid, q, a, t, layer.qweight, layer.scales, y, p, m, layer.n, layer.k)
    if tile.splits > 1:
        _reduce(layer, p, y, tile.splits)


def _run_gluon(layer, q, a, t, y, m, tile: table.Tile, pdl: bool = False) -> None:
    if (gpu.capability(y.device) or (0, 0)) < (8, 0):
        raise table.Pq2ConfigError("the gluon pq2 path needs mma.sync int8 (sm_80+): plan another kernel")
    rt = tile.bn // (16 * tile.warps)  # m16 row tiles per warp
    ring = tile.stages if tile.stages > 1 else 0
    if tile.bt not in (8, 16) or tile.bn % (16 * tile.warps) or rt & (rt - 1) or tile.maxnreg or not 1 <= tile.bc <= 4 \
            or (ring and tile.bc != 1):
        raise table.Pq2ConfigError(f"gluon tile {tile}: bt must be 8 or 16, bn a power-of-two multiple of 16 x warps, "
                                   "bc (groups per step) 1..4 (1 with a cp.async ring, stages > 1), no maxnreg")
    from radiance.kernels.triton.pq2_gluon import pq2_mma_gl  # Gluon: imported only where it runs

    groups = layer.k // GROUP
    gps = -(-groups // tile.splits)
    splits = -(-groups // gps)
    tiles = triton.cdiv(m, tile.bt) * triton.cdiv(layer.n, tile.bn)
    grid = (triton.cdiv(m, tile.bt), triton.cdiv(layer.n, tile.bn), splits)
    if tile.persist:  # stream-K: `splits` becomes the most programs sharing a tile (its partial slots)
        progs, splits = stream_programs(tile.persist * _sms(y.device), m, layer.n, tile.bt, tile.bn, groups)
        grid = (1, 1, progs)
    tickets = _TICKETS.get(y.device)
    if tickets is None or tickets.numel() < tiles:
        raise RuntimeError(f"pq2 gluon: split-K tickets for {tiles} tiles not reserved on {y.device} "
                           "(pq2_ops.prepare reserves them; prepare the layer on this device first)")
    p = y if splits == 1 else torch.empty((splits, m, layer.n), dtype=torch.float32, device=y.device)

    def make():
        return Launch(pq2_mma_gl, {"BN": tile.bn, "BT": tile.bt, "WARPS": tile.warps, "GU": tile.bc, "RING": ring,
                                    "STREAM": tile.persist > 0, "PDL": pdl}, tile.warps, 1,
                       pdl=pdl)

    launch = layer.plan(("gluon", tile, y.dtype, pdl), make)
    launch(grid, q.view(torch.int32), a, t, layer.qweight32, layer.scales, y, p, tickets,
           m, layer.n, layer.k, groups, gps, splits)


def _run_dp4a(layer, q, a, t, y, m, tile: table.Tile, pdl: bool = False) -> None:
    if tile.rr < 1 or tile.bn % tile.rr or (tile.bn // tile.rr) & (tile.bn // tile.rr - 1):
        raise table.Pq2ConfigError(f"dp4a tile {tile}: rr must divide bn into power-of-two sub-tiles")
    p = y if tile.splits == 1 else torch.empty((tile.splits, m, layer.n), dtype=torch.float32, device=y.device)
    groups = layer.k // GROUP
    per = -(-(-(-groups // tile.bc)) // tile.splits) * tile.bc  # groups per split, as the kernel computes it
    even = layer.n % tile.bn == 0 and groups % per == 0 and per % tile.bc == 0 and groups // per == tile.splits
    launch = layer.plan(("dp4a", tile, y.dtype, pdl), lambda: Launch(
        pq2_gemv_dp4a, {"BN": tile.bn, "BC": tile.bc, "MR": tile.mr, "RR": tile.rr, "SPLITS": tile.splits, "STAGES": tile.stages,
                        "ASM": not INTERPRET, "EVEN": even, "PDL": pdl}, tile.warps, 1, tile.maxnreg, pdl=pdl))
    grid = (triton.cdiv(layer.n, tile.bn), tile.splits, triton.cdiv(m, tile.mr))
    launch(grid, q.view(torch.int32), a, t, layer.qweight32, layer.scales, y, p, m, layer.n, layer.k, layer.k // 16)
    if tile.splits > 1:
        _reduce(layer, p, y, tile.splits)


# kernel name -> its launcher (layer, q, a, t, y, m, tile[, pdl]): the run half of pq2_table.KERNELS
LAUNCHERS: dict[str, Callable] = {"legacy": _run_legacy, "planes": _run_planes, "gluon": _run_gluon,
                                  "gluon_wgmma": run_gluon_wgmma, "gluon_ws": run_gluon_ws, "dp4a": _run_dp4a}


# ----------------------------------------------------------------------------- skinny bf16 GEMM
_SKINNY_PLANS: dict = {}


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  tile: table.SkinnyTile | None = None, force: bool = False) -> torch.Tensor:
    """y = x W^T (+ bias) for an unquantized projection: the split-K GEMM where it applies
    (few rows, narrow N), else torch's matmul (cuBLAS on NVIDIA)."""
    k = x.shape[-1]
    n = weight.shape[0]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if force and m > table.SKINNY_MAX_M:
        raise ValueError(f"the skinny GEMM covers at most {table.SKINNY_MAX_M} rows, got M={m}")
    if not (force or table.skinny_applies(m, n, k)) or m == 0:
        y = x2 @ weight.t()
    else:
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        if not weight.is_contiguous():
            raise ValueError("skinny_linear needs a contiguous [N, K] weight (prepare it once after loading)")
        tile = tile or table.SkinnyTile()
        splits = triton.cdiv(k, tile.ksplit)
        p = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        # per device and arch: a plan holds the kernel loaded for the GPU it first ran on
        key = (tile, n, k, x.dtype, x.device, gpu.arch(x.device), x2.data_ptr() % 16 == 0, x2.stride(0) % 16 == 0,
               weight.data_ptr() % 16 == 0)
        launch = _SKINNY_PLANS.get(key)
        if launch is None:
            launch = _SKINNY_PLANS[key] = Launch(
                skinny_splitk_gemm, {"BM": 16, "BN": tile.bn, "BK": tile.bk, "KSPLIT": tile.ksplit}, tile.warps, 2)
        launch((triton.cdiv(n, tile.bn), splits), x2, weight, p, m, n, k, x2.stride(0))
        rkey = ("reduce", splits, x.dtype, x.device, gpu.arch(x.device))
        red = _SKINNY_PLANS.get(rkey)
        if red is None:
            red = _SKINNY_PLANS[rkey] = Launch(reduce_splits, {"SPLITS": splits, "BLOCK": REDUCE_BLOCK}, 4, 1)
        red((triton.cdiv(m * n, REDUCE_BLOCK),), p, y, m * n)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, n)


def dense_plan(weight: torch.Tensor, cap: tuple[int, int] | None = None,
               config: KernelConfig | None = None) -> registry.Plan:
    """The kernel plan of an unquantized linear on NVIDIA (pq2_table.DENSE_KERNELS)."""
    n, k = (int(d) for d in weight.shape)
    target = registry.Target.of("dense", "cuda", n, k, config or KernelConfig.from_knobs(),
                                cap or _capability(weight.device))
    return registry.choose(table.DENSE_KERNELS, target)


def dense_linear(x: torch.Tensor, weight: torch.Tensor, plan: registry.Plan, bias: torch.Tensor | None = None):
    """An unquantized linear on NVIDIA as planned: the skinny split-K GEMM or cuBLAS."""
    if plan.spec(x.shape[0]).kernel == "skinny":
        return skinny_linear(x, weight, bias)
    return torch.nn.functional.linear(x, weight, bias)


# ----------------------------------------------------------------------------- the ("pq2", "cuda") and
# ("dense", "cuda") entries of kernels/methods/: a PreparedLinear's payload is a Pq2Layer / the weight and its plan
def prepare_linear(prep: PreparedLinear, t: Pq2Tensors) -> None:
    prep.data["pq2"] = prepare(t.qweight, t.scales, config=prep.config)  # type: ignore[assignment]


def forward_linear(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = forward(prep.data["pq2"], x)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def produced_linear(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    y = forward_produced(prep.data["pq2"], producer)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def dense_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data["w"] = weight.contiguous()
    prep.data["kernels"] = dense_plan(weight, config=prep.config)  # type: ignore[assignment]


def dense_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return dense_linear(x, prep.data["w"], prep.data["kernels"], bias)  # type: ignore[arg-type]
