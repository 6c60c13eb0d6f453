"""The gfx1201 kernels as registry entries (kernels/registry.py), as the NVIDIA tables are: per
method the decode kernel (split-K, per-group fp8 activation scales) on rows 1..RADIANCE_PQ_DECODE_MAX_M
and the prefill kernel (per-token scales) above; RADIANCE_DISABLED_KERNELS takes their names.
The layer keeps the decode band's top row (`decode_rows`), which its custom op reads per call."""

from __future__ import annotations

from radiance.kernels.hip import DECODE_MAX_ROWS
from radiance.kernels.registry import ROWS_MAX, KernelSpec, Plan, Target, register


def _fits(t: Target) -> str | None:
    if t.decode_max_m > DECODE_MAX_ROWS:
        return (f"takes at most {DECODE_MAX_ROWS} rows, RADIANCE_PQ_DECODE_MAX_M={t.decode_max_m}; "
                f"give 1..{DECODE_MAX_ROWS}")
    return None


def _rotated(method: str) -> list[KernelSpec]:
    return register([KernelSpec(f"{method}.hip_decode", "rocm", lambda t: (1, t.decode_max_m), check=_fits),
                     KernelSpec(f"{method}.hip_prefill", "rocm", lambda t: (t.decode_max_m + 1, ROWS_MAX))])


PAROQUANT = _rotated("paroquant")
MXFP4 = _rotated("paroquant_mxfp4")
# unquantized (skipped) linears: no skinny HIP kernel yet, the platform BLAS
DENSE = register([KernelSpec("dense.hipblas", "rocm", lambda t: (1, ROWS_MAX))])


def decode_rows(plan: Plan) -> int:
    """The rows the plan runs on the decode kernel (1..this; 0: none)."""
    return max((hi for lo, hi, s in plan.pieces if s.kernel == "hip_decode"), default=0)
