"""Per-layer pq2 ops on NVIDIA (Triton): prepare the weights once after loading, then forward.

No vLLM here: the plugin calls `prepare` / `forward`; the benchmark and the gpu tests call them
directly. The kernel per row count is planned at prepare from kernels/nvidia/pq2's `KERNELS`
(kernels/registry.py); its tile (tiles/<arch>.json, else its heuristic) and launch are that kind
module's, the kernels in `triton/pq2_*`.

Launch cost: prefill runs outside CUDA graphs, where Triton's Python launcher (argument binding,
specialization keys) costs tens of µs per kernel. Each layer caches a launch plan per
(kernel, tile, argument-alignment key): the compiled kernel, called directly after its first launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig
from radiance.kernels.formats.pq2 import Pq2Tensors
from radiance.kernels.launch import INTERPRET, Launch
from radiance.kernels.linear import PreparedLinear
from radiance.kernels.nvidia import pool
from radiance.kernels.nvidia import pq2 as table
from radiance.kernels.nvidia.pq2.common import SMALL_MAX_M
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.pdl import enabled as pdl_enabled
from radiance.kernels.producers import AddRmsNorm, Producer, SiluMul
from radiance.kernels.triton.pq2_common import ROW_BLOCK
from radiance.kernels.triton.pq2_quant import GROUP, _quant_groups, quant_grid

QUANT_GB = 4  # groups per quantization program
# Rows the fused producers take (forward_produced). Each quantizer program reads its row once more
# for the norm's sum of squares, K / (128 QUANT_GB) programs per row (paroquant's prologue reads it
# once per group and rotated copy); on the H200 the norm and the silu-mul producer each beat the
# unfused op + quantizer at M = 1, 4 and 16 (bench/bench_producers.py --sites), unmeasured above
PRODUCER_MAX_M = 16
FUSED_MAX_M = {"norm": PRODUCER_MAX_M, "silu_mul": PRODUCER_MAX_M}  # per producer kind (both fused alike)


@dataclass
class Pq2Layer:
    """Prepared weights of one pq2 linear, and its launch plans."""

    qweight: torch.Tensor  # [N/128, G, 128, 32] uint8 (rows padded to 128; pq2_common.block_row)
    scales: torch.Tensor  # [N, K/128] f16
    n: int
    k: int
    kernels: registry.Plan  # rows -> kernel (kernels/nvidia/pq2 KERNELS), chosen at prepare
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
    if gpu.capability(qweight.device):  # the gluon kind's split-K tickets
        pool.reserve(qweight.device, what="pq2")
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


def forward(layer: Pq2Layer, x: torch.Tensor, path: str | None = None, tile: Tile | None = None,
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
                       tile: Tile | None = None, producer: Producer | None = None) -> None:
    # the planned (or forced) kernel at y's rows: the quantizer (computing the producer), then the GEMM
    m = y.shape[0]
    path, tile = choose(layer, m, x2.device, path, tile)
    dep = launches_dependent(layer, path, m)
    q, a, t = quantize_activations(x2, planes=table.KINDS[path].PLANES, layer=layer, trigger=dep, producer=producer)
    gemm_quantized(layer, path, tile, q, a, t, y, pdl=dep)


def choose(layer: Pq2Layer, m: int, device: torch.device, path: str | None = None,
           tile: Tile | None = None) -> tuple[str, Tile]:
    """The (path, tile) forward runs M rows on: the layer's plan and the tile table, unless forced."""
    path = path or layer.kernels.spec(m).kernel
    if tile is None:
        tile = table.tile_for(path, layer.n, layer.k, m, _sms(device), not layer.exact, gpu.arch(device))
    return path, tile


def launches_dependent(layer: Pq2Layer, path: str, m: int) -> bool:
    """Whether `path`'s GEMM at M rows launches dependent on the quantizer before it (on the layer's device)."""
    return layer.pdl and path in table.PDL_PATHS and m <= SMALL_MAX_M


def gemm_quantized(layer: Pq2Layer, path: str, tile: Tile, q: torch.Tensor, a: torch.Tensor, t: torch.Tensor,
                   y: torch.Tensor, pdl: bool = False) -> None:
    """y [M, N] from quantize_activations' outputs (plane order for every path but legacy): the
    GEMM launch(es) alone (forward's second half; bench/floor.py times it apart). pdl: launched
    dependent on the quantizer just before it (which triggered; launches_dependent)."""
    m = q.shape[0]
    if pdl and path not in table.PDL_PATHS:
        raise table.Pq2ConfigError(f"pq2 {path}: only {', '.join(table.PDL_PATHS)} launch dependent on the quantizer")
    kind = table.KINDS.get(path)
    if kind is None:
        raise table.Pq2ConfigError(f"unknown pq2 path {path!r}: use one of {', '.join(table.KINDS)}")
    kind.launch(layer, q, a, t, y, m, tile, pdl)


# ----------------------------------------------------------------------------- the ("pq2", "cuda") entry of
# kernels/methods/pq2.py: a PreparedLinear's payload is a Pq2Layer
def prepare_linear(prep: PreparedLinear, t: Pq2Tensors) -> None:
    prep.data["pq2"] = prepare(t.qweight, t.scales, config=prep.config)  # type: ignore[assignment]


def forward_linear(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = forward(prep.data["pq2"], x)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def produced_linear(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    y = forward_produced(prep.data["pq2"], producer)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)
