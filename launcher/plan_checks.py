"""Plan-time checks that need the resolved mode, knobs or checkpoint, not just the stack file.

Each returns the problem in words (None: fine); launcher/plan.py raises it with the file position.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from radiance.kernels.hip import DECODE_MAX_ROWS as GFX_DECODE_MAX_ROWS  # the decode kernel refuses more rows
from radiance.knobs import KNOBS
from radiance.launcher.kernel_specs import SpecError, linear_groups
from radiance.stack import vendor


def decode_band(arch: str, quant_is_plugin: bool, spec: int, max_num_seqs: int | None,
                env: Mapping[str, str]) -> str | None:
    """A verify batch is max_num_seqs x (spec + 1) rows: beyond RADIANCE_PQ_DECODE_MAX_M the widest
    ones run on the prefill kernels (GPU), and gfx1201's decode kernel takes at most 64 rows."""
    if not quant_is_plugin or not arch.startswith(("sm_", "gfx")):
        return None
    name = "RADIANCE_PQ_DECODE_MAX_M"
    raw = env.get(name, KNOBS[name].default)
    try:
        top = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{name}={raw!r} is not a whole number"
    if vendor(arch) == "rocm" and top > GFX_DECODE_MAX_ROWS:
        return (f"{name}={top}, but the {arch} decode kernel takes at most {GFX_DECODE_MAX_ROWS} rows; "
                f"give 1..{GFX_DECODE_MAX_ROWS}")
    if not spec:
        return None
    if max_num_seqs is None:
        return (f"spec={spec} needs `max_num_seqs`: vLLM's default of 256 sequences x {spec + 1} rows per verify "
                f"batch is far above {name}={top}; set max_num_seqs to at most {max(1, top // (spec + 1))}")
    rows = max_num_seqs * (spec + 1)
    if rows > top:
        return (f"max_num_seqs={max_num_seqs} x (spec={spec} + 1) = {rows} rows per verify batch, above "
                f"{name}={top}: the widest batches would fall onto the prefill kernels; lower max_num_seqs to "
                f"{max(1, top // (spec + 1))} or spec, or raise {name}"
                + (f" (at most {GFX_DECODE_MAX_ROWS} here)" if vendor(arch) == "rocm" else ""))
    return None


def int8_activations(arch: str, env: Mapping[str, str]) -> str | None:
    """RADIANCE_PQ_I8 asks for int8 activations; gfx1201's HIP kernels have only the fp8 x fp8 WMMA
    path, so there the knob would change nothing but the compile-cache key: refused, not ignored."""
    raw = env.get("RADIANCE_PQ_I8", KNOBS["RADIANCE_PQ_I8"].default)
    if vendor(arch) == "rocm" and raw not in (None, "", "0"):
        return (f"RADIANCE_PQ_I8={raw}, but {arch} has no int8 activation path (its HIP kernels run fp8 x fp8 "
                "WMMA only); remove the knob from this stack (it is for NVIDIA sm_80+)")
    return None


def gated_shapes(want: set[tuple[int, int]], model: Path, quant: str) -> str | None:
    """RADIANCE_PQ_CHECKALL names full-model N:K shapes (each TP rank checks its slice of them): every
    one must be a `quant` linear of the checkpoint, or eval mode would check nothing and pass."""
    try:
        groups, _ = linear_groups(model, quant)
    except SpecError as e:
        return f"cannot read the checkpoint's linear shapes: {e}"
    have = sorted({g.shape for g in groups if g.method == quant})
    missing = [f"{n}:{k}" for n, k in sorted(want) if (n, k) not in have]
    if missing:
        return (f"{', '.join(missing)} match no {quant} linear of {model} (full-model N:K, vLLM's merged "
                f"projections: {', '.join(f'{n}:{k}' for n, k in have)})")
    return None
