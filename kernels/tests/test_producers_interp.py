"""The fused producers under Triton's CPU interpreter against the unfused ops (reference.py, then
the prologue), in a child process (TRITON_INTERPRET is read when the kernels are decorated).
fp16, since the interpreter rounds to bf16 by truncation; the GPU test gates bf16 and the rest
(kernels/tests/test_producers_gpu.py). Tolerances: 2e-3 relative on the rotated values; the
residual out bit-identical; the layer fed by a producer 2e-3 against the layer on the unfused output.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_producers_under_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("RADIANCE_PQ_I8", None)
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "checks passed" in proc.stdout


def _main() -> None:
    import torch

    from radiance.kernels import paro_ops, reference
    from radiance.kernels.producers import AddRmsNorm, SiluMul
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton import paro_rotate as pr
    from radiance.testing import paro_random as rnd

    gen = torch.Generator().manual_seed(3)
    failures = []

    def check(name, err, tol):
        print(f"{name}: {err:.2e} (tol {tol:.0e})")
        if not err <= tol:
            failures.append(name)

    k = 384
    parts = [rnd.random_layer(256, k, gen), rnd.random_layer(128, k, gen)]
    tab = pr.build_tables([rnd.rotation_of(t) for t in parts])
    x, res = (torch.randn(3, k, generator=gen).half() for _ in range(2))
    w = (1 + 0.2 * torch.randn(k, generator=gen)).half()
    normed, want_r = reference.add_rms_norm(x, res, w, 1e-6)
    for mode in (pr.ROT32, pr.I8G, pr.F16G):
        (a, s, _), ro = pp.add_norm_rotate(x, res, w, 1e-6, tab, mode)
        wa, ws, _ = pr.rotate(normed, tab, mode)
        got, want = (a.float(), wa.float()) if s is None else (a.float() * s.repeat_interleave(128, -1),
                                                               wa.float() * ws.repeat_interleave(128, -1))
        check(f"add_norm_rotate mode {mode}", rnd.rel(got, want), 2e-3)
        check(f"residual out mode {mode} (exact)", float((ro.float() - want_r.float()).abs().max()), 0)
    gu = torch.randn(3, 2 * k, generator=gen).half() * 3
    a, _, _ = pp.silu_mul_rotate(gu, tab, pr.ROT32)
    check("silu_mul_rotate", rnd.rel(a, pr.rotate(reference.silu_mul(gu), tab, pr.ROT32)[0]), 2e-3)

    y, ro = pp.add_norm(x, res, w, 1e-6)  # the unfused kernels (above the fused bands)
    check("add_norm", rnd.rel(y, normed), 2e-3)
    check("add_norm residual out (exact)", float((ro.float() - want_r.float()).abs().max()), 0)
    check("rms_norm", rnd.rel(pp.add_norm(x, None, w, 1e-6)[0], reference.add_rms_norm(x, None, w, 1e-6)[0]), 2e-3)
    check("silu_mul", rnd.rel(pp.silu_mul(gu), reference.silu_mul(gu)), 2e-3)

    layer = paro_ops.prepare(*rnd.merged(parts))
    for m in (1, 3):
        xm, rm = x[:m].contiguous(), res[:m].contiguous()
        y = paro_ops.forward_produced(layer, AddRmsNorm(xm, rm, w, 1e-6))
        check(f"layer after add_norm_rotate M={m}",
              rnd.rel(y, paro_ops.forward(layer, reference.add_rms_norm(xm, rm, w, 1e-6)[0])), 2e-3)
        y = paro_ops.forward_produced(layer, SiluMul(gu[:m].contiguous()))
        check(f"layer after silu_mul_rotate M={m}", rnd.rel(y, paro_ops.forward(layer, reference.silu_mul(gu[:m]))), 2e-3)
    # pq2: its activation quantizer computing the op (codes against the quantizer on the op's output)
    from radiance.kernels import pq2_ops

    for p, out in ((SiluMul(gu), reference.silu_mul(gu)), (AddRmsNorm(x, res, w, 1e-6), normed)):
        got = pq2_ops.quantize_activations(gu if p.KIND == "silu_mul" else x, True, producer=p)
        want = pq2_ops.quantize_activations(out, True)
        check(f"pq2 {p.KIND} codes (differing)", int((got[0] != want[0]).sum()), 0 if p.KIND == "silu_mul" else 2)
        check(f"pq2 {p.KIND} scales", rnd.rel(got[1], want[1]), 2e-3)
    check("pq2 residual out (exact)", float((p.residual_out.float() - want_r.float()).abs().max()), 0)
    # the warm-up runs every producer the knobs turn on (here through the NVIDIA plan, interpreted)
    import os

    from radiance.kernels import ops, warmup

    os.environ["RADIANCE_PQ_ROT_STREAM"] = os.environ["RADIANCE_PQ_ROT_STREAM2"] = "1"
    spec = warmup.LinearSpec("paroquant", (256,), k, False, "float16")
    prep = warmup.synthetic(spec, torch.device("cpu"), platform="cuda")
    calls = []
    real = paro_ops.produced_linear
    paro_ops.produced_linear = lambda *a: calls.append(a[1].KIND) or real(*a)
    warmup.warm_producers(prep, spec, torch.device("cpu"))
    check("warm-up producer calls (norm 2 x 1 row, silu-mul 16)",
          abs(calls.count("norm") - 2) + abs(calls.count("silu_mul") - 16), 0)
    spec = warmup.LinearSpec("pq2", (256,), k, False, "float16")  # pq2 fuses both to its own band
    prep = warmup.synthetic(spec, torch.device("cpu"), platform="cuda")
    calls.clear()
    real = pq2_ops.produced_linear
    pq2_ops.produced_linear = lambda *a: calls.append(a[1].KIND) or real(*a)
    warmup.warm_producers(prep, spec, torch.device("cpu"))
    check("pq2 warm-up producer calls (norm 2 x 16 rows, silu-mul 16)",
          abs(calls.count("norm") - 2 * pq2_ops.PRODUCER_MAX_M) + abs(calls.count("silu_mul") - 16), 0)
    if failures:
        sys.exit(f"failed: {failures}")
    print("checks passed")


if __name__ == "__main__":
    _main()
