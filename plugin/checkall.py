"""RADIANCE_PQ_CHECKALL: compare each gated call against the exact fp32 dequant reference.

Eval only (the launcher's eval mode runs eager). For a layer whose (N, K) in the whole model is
listed (vLLM's merged projections as one; under tensor parallelism every rank checks its slice, so
the shapes a user writes do not depend on TP), every call (up to RADIANCE_PQ_CHECK_MAX_CALLS per
layer) logs `CHECKALL <layer> ... rel=<|y - round(y_ref)| / |y_ref|> rel_fp32=<|y - y_ref| / |y_ref|>
call=<checked so far> [rank=<r>/<tp> slice=<N>:<K>]` over its first RADIANCE_PQ_CHECK_MAX_M rows. `rel` measures the kernel against the exact result rounded to
the kernel's output dtype (0 for the CPU path, which is exact); `rel_fp32` adds that rounding
(~1.6e-3 for bf16 outputs). The reference dequantizes the raw checkpoint tensors in chunks of
`CHUNK` output columns (never a full code matrix: a 27B layer's int64 codes fill a worker's memory), per
projection, so it also checks the rotation dedup and the partition mapping. Calls whose input is
all zeros (vLLM's profile run) are labeled `zero-input` instead of passing vacuously. With the
producer knobs set, the linears fed by a norm or silu-mul also check the fused producers
(plugin/checkall_producers.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from radiance.kernels import reference
from radiance.kernels.formats.pq2 import Pq2Tensors
from radiance.knobs import checkall_shapes, knob, knob_int
from radiance.plugin import checkall_producers
from radiance.plugin.layout import Layout
from radiance.plugin.params import partition_rotation

log = logging.getLogger("radiance.plugin.checkall")
CHUNK = 512


def gated_shapes() -> set[tuple[int, int]]:
    raw = knob("RADIANCE_PQ_CHECKALL")
    return checkall_shapes(raw) if raw else set()


def _rotated_exact(layer, lay: Layout, x: torch.Tensor, bias: torch.Tensor | None, dequant: Callable) -> torch.Tensor:
    """Per partition, the reference rotation of x times the fp32 weight that `dequant(c0, c1)` gives
    for output columns [c0, c1), CHUNK columns at a time."""
    out = x.new_empty((x.shape[0], sum(lay.sizes)), dtype=torch.float32)
    for p, (n0, n1) in enumerate(lay.partition_bounds()):
        rot = partition_rotation(layer, p)
        xr = reference.rotate(x.float(), rot.pairs, rot.theta, rot.channel_scales)
        for c0 in range(n0, n1, CHUNK):
            c1 = min(c0 + CHUNK, n1)
            out[:, c0:c1] = xr @ dequant(c0, c1).t()
    return out if bias is None else out + bias.float()


def paroquant_exact(layer, lay: Layout, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _rotated_exact(layer, lay, x, bias, lambda c0, c1: reference.dequant_paroquant(
        layer.qweight.data[:, c0 // 8:c1 // 8], layer.qzeros.data[:, c0 // 8:c1 // 8], layer.scales.data[:, c0:c1]))


def paroquant_mxfp4_exact(layer, lay: Layout, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _rotated_exact(layer, lay, x, bias, lambda c0, c1: reference.dequant_mxfp4(
        layer.weight.data[c0:c1], layer.weight_scale.data[c0:c1]))


def pq2_exact(layer, lay: Layout, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    n = sum(lay.sizes)
    out = x.new_empty((x.shape[0], n), dtype=torch.float32)
    for c0 in range(0, n, CHUNK):
        c1 = min(c0 + CHUNK, n)
        t = Pq2Tensors(layer.qweight.data[c0:c1], layer.scales.data[c0:c1])
        out[:, c0:c1] = reference.pq2_linear(x.float(), t)  # int8 per-group activations, as the format defines
    return out if bias is None else out + bias.float()


def checker(layer, lay: Layout, method: str, exact: Callable, n_rank: int, k_rank: int,
            producers: tuple[bool, bool] = (False, False)):
    """A hook for custom_op (called with the kernel's x, y, bias), or None when the layer's full-model
    shape is not gated. (n_rank, k_rank): what this rank's kernel computes. `producers`: the fused
    producers the layer's KernelConfig asks for (norms, silu-mul), whose sites are checked too."""
    n, k = sum(lay.disk_n), lay.disk_k
    if (n, k) not in gated_shapes():
        return None
    where = f" rank={lay.tp_rank}/{lay.tp_size} slice={n_rank}:{k_rank}" if lay.tp_size > 1 else ""
    max_m = knob_int("RADIANCE_PQ_CHECK_MAX_M")
    max_calls = knob_int("RADIANCE_PQ_CHECK_MAX_CALLS") if knob("RADIANCE_PQ_CHECK_MAX_CALLS") else None
    done = [0]
    fused = any(producers)
    if fused:
        checkall_producers.install(*producers)

    def check(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None) -> None:
        rows = x[:max_m]
        head = f"CHECKALL {lay.prefix} {method} N={n} K={k} M={x.shape[0]}"
        if not bool(rows.any()):
            log.info("%s zero-input", head)
            return
        if max_calls is not None and done[0] >= max_calls:
            return
        done[0] += 1
        ref = exact(layer, lay, rows, bias)
        got = y[:max_m].float()
        norm = ref.norm().clamp_min(1e-30)
        rel = float((got - ref.to(y.dtype).float()).norm() / norm)
        rel_fp32 = float((got - ref).norm() / norm)
        log.info("%s rel=%.3e rel_fp32=%.3e call=%d%s", head, rel, rel_fp32, done[0], where)
        if fused:
            checkall_producers.check(layer, head, x, y, bias, max_m)

    return check
