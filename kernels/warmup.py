"""Compile every NVIDIA kernel a model's linears can run before vLLM serves a request.

Triton compiles a kernel the first time a call needs it. Inside a request that is a latency spike
of seconds, and vLLM (from 0.26) warns about -- in its error mode fails on -- any Triton compile
after its own warm-up (its JIT monitor). So the kernels a model can ever ask for are compiled up front, twice over:

- the launcher runs `python -m radiance.kernels.warmup` once per checkpoint (kernels/build.py) on
  synthetic layers of the checkpoint's shapes: every variant lands in TRITON_CACHE_DIR, and a
  Triton that cannot compile them fails the launch, not vLLM's profile run;
- each vLLM worker warms its own prepared layers at load (`pending` + `warm`), one per distinct shape:
  Triton's per-process cache then holds every variant before vLLM's monitor starts (loaded from
  the disk cache the launcher filled, or compiled here when it missed one; `cache_entries` counts).

Which rows: every M from 1 to ALL_M, where the kinds' bands and tiles change (kernels/nvidia/;
test_warmup checks that nothing changes above), then one row count of each of
Triton's integer specializations above it (a multiple of 16 and not), which stand for every larger M.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from radiance.kernels import methods, ops
from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.linear import DTYPES
from radiance.kernels.producers import AddRmsNorm, SiluMul
from radiance.kernels.linear_spec import NO_GPU, LinearSpec  # noqa: F401  (the warm-up's interface)
from radiance.kernels.methods import ROTATED_METHODS

ALL_M = 1024  # every row count up to here is warmed; the tables choose the same kernels for any M above
ABOVE_M = (ALL_M + 1, ALL_M + 16)  # Triton specializes integer arguments on divisibility by 16


def warm_rows() -> list[int]:
    return list(range(1, ALL_M + 1)) + list(ABOVE_M)


def spec_of(prep: ops.PreparedLinear, bias: torch.Tensor | None, dtype: torch.dtype) -> LinearSpec:
    sizes = tuple(r.n1 - r.n0 for r in prep.runs) if prep.method in ROTATED_METHODS else (prep.out_features,)
    return LinearSpec(prep.method, sizes, prep.in_features, bias is not None, str(dtype).removeprefix("torch."))


def synthetic(spec: LinearSpec, device: torch.device, seed: int = 0, platform: str | None = None) -> ops.PreparedLinear:
    """A prepared layer of `spec`'s shape with random codes and rotations (values are irrelevant to
    which kernels compile; distinct rotations keep the partitions apart as in a real checkpoint),
    each tensor drawn from the values its format holds (kernels/methods: `Tensor.values`).
    `platform`: as ops.prepare's (the offline compile check prepares CPU tensors for a GPU)."""
    method = methods.get(spec.method)
    g = torch.Generator(device="cpu").manual_seed(seed)
    k, n, groups = spec.k, spec.n, spec.k // GROUP_SIZE
    weights = {}
    for name, t in method.weights.items():
        shape, (lo, hi) = t.shape(n, k, 8), t.values
        dtype = getattr(torch, spec.dtype) if t.dtype == "BF16" else DTYPES[t.dtype]  # a dense weight: the model's
        if dtype.is_floating_point:
            w = torch.rand(shape, generator=g) * (hi - lo) + lo
        else:
            w = torch.randint(int(lo), int(hi), shape, generator=g, dtype=torch.int64)
        weights[name] = w.to(dtype).to(device)
    rotations = []
    for _ in spec.sizes if method.rotated else ():
        pairs = torch.argsort(torch.rand(8 * groups, GROUP_SIZE, generator=g), dim=-1).view(8, k).to(torch.int16)
        theta = (torch.rand(8, k // 2, generator=g) * 6.28 - 3.14).half()
        rotations.append(ops.Rotation(pairs.to(device), theta.to(device), torch.ones(1, k, dtype=torch.float16, device=device)))
    return ops.prepare(spec.method, weights, rotations, list(spec.sizes), platform)


def warm(prep: ops.PreparedLinear, spec: LinearSpec, device: torch.device, rows: list[int] | None = None) -> None:
    """Run `prep` once at every warm-up row count (outputs discarded)."""
    dtype = getattr(torch, spec.dtype)
    rows = rows or warm_rows()
    x = torch.randn(max(rows), spec.k, dtype=dtype, device=device) * 0.5
    bias = torch.randn(spec.n, dtype=dtype, device=device) * 0.1 if spec.bias else None
    for m in rows:
        ops.linear_forward(prep, x[:m], bias)
    warm_producers(prep, spec, device, bias)


def warm_producers(prep: ops.PreparedLinear, spec: LinearSpec, device: torch.device,
                   bias: torch.Tensor | None = None) -> None:
    """The fused producers the knobs turn on (RADIANCE_PQ_ROT_STREAM / _ROT_STREAM2), at every row
    count each runs fused (the platform's `fused_rows`): a layer of this spec may sit after a norm
    or a silu-mul, so both."""
    entry = methods.get(prep.method).platforms[prep.platform]
    if not ops.can_produce(prep)[0] or entry.fused_rows is None:
        return
    band = methods.resolve(entry.fused_rows)
    dtype = getattr(torch, spec.dtype)
    w = torch.ones(spec.k, dtype=dtype, device=device)
    for on, kind in zip(prep.config.producers, ("norm", "silu_mul")):
        for m in range(1, band[kind] + 1) if on else ():
            x = torch.randn(m, spec.k * (2 if kind == "silu_mul" else 1), dtype=dtype, device=device)
            if kind == "silu_mul":
                ops.produced_forward(prep, SiluMul(x), bias)
            else:
                for res in (x, None):  # fused_add_rms_norm, rms_norm
                    ops.produced_forward(prep, AddRmsNorm(x, res, w, 1e-6), bias)


_WARMED: set[LinearSpec] = set()


def pending(prep: ops.PreparedLinear, bias: torch.Tensor | None, dtype: torch.dtype) -> LinearSpec | None:
    """In a vLLM worker: this layer's spec if its kernels still need warming (no layer of the same
    spec was warmed in this process), else None. Only NVIDIA compiles per call: the CPU reference
    compiles nothing and gfx1201's HIP library is built at start."""
    if prep.platform != "cuda":
        return None
    spec = spec_of(prep, bias, dtype)
    if spec in _WARMED:
        return None
    _WARMED.add(spec)
    return spec


def cache_entries(cache_dir: str | os.PathLike | None = None) -> int:
    """Kernels in Triton's disk cache (one directory per compiled variant)."""
    root = Path(cache_dir or os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return sum(1 for p in root.iterdir() if p.is_dir()) if root.is_dir() else 0


def warm_specs(specs: list[LinearSpec], device: torch.device) -> dict:
    """The launcher's step: every spec on a synthetic layer; returns what it did."""
    before, t0 = cache_entries(), time.monotonic()
    for i, spec in enumerate(specs):
        prep = synthetic(spec, device, seed=i)
        warm(prep, spec, device)
        del prep
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"specs": len(specs), "rows": len(warm_rows()), "compiled": cache_entries() - before,
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radiance.kernels.warmup", description=__doc__.splitlines()[0])
    p.add_argument("--specs", type=Path, required=True, help="JSON list of LinearSpec fields")
    p.add_argument("--report", type=Path, required=True, help="where to write what was compiled (JSON)")
    args = p.parse_args(argv)
    specs = [LinearSpec(s["method"], tuple(s["sizes"]), s["k"], s["bias"], s["dtype"])
             for s in json.loads(args.specs.read_text())]
    if not torch.cuda.is_available():
        print("warm-up: no CUDA device visible; the NVIDIA kernels are warmed on the GPU they serve on",
              file=sys.stderr)
        return NO_GPU
    report = warm_specs(specs, torch.device("cuda", 0))
    args.report.write_text(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
