"""Every NVIDIA kernel variant the dispatch tables pick, compiled for the users' cards (sm_75 RTX
2060, sm_86 RTX 3090) and the lent H200 (sm_90) with the Triton installed here -- no GPU needed
(radiance.testing.offline_compile runs the real ops on CPU tensors and launches nothing).

What it proves where no such card is: each path the tables choose for the benchmark shapes and odd
ones, at every M band, under every kernel set and knob that changes the choice, compiles with this
Triton (CI: the one torch 2.13 brings, as current vLLM images do; the device runs Triton 3.6), asks
for no more shared memory than the card lets a block have, and spills no registers to local memory.
Numerics are the gpu tests' job (test_pq2_gpu.py, test_paro_gpu.py on the device).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.integration  # minutes: ~300 kernel builds when Triton's cache is cold

# the gpu tests' shapes (test_pq2_gpu.BENCH_SHAPES / ODD_SHAPES, test_paro_gpu.SHAPES)
PQ2_SHAPES = [(34816, 5120), (5120, 17408), (14336, 5120), (5120, 6144), (248320, 5120), (1000, 384), (96, 5120),
              (4100, 1152)]
PQ2_MS = [1, 2, 3, 8, 9, 16, 17, 64, 65, 512, 2048]  # each band edge of kernels/nvidia/pq2
PARO_SHAPES = {"gate_up": ([34816], 5120), "down": ([5120], 17408), "qkv": ([14336], 5120), "out": ([5120], 6144),
               "qkv_P3": ([12288, 1024, 1024], 5120), "gate_up_P2": ([17408, 17408], 5120), "odd_n": ([1000], 1280)}
PARO_MS = [1, 2, 3, 8, 9, 16, 17, 64, 65, 256, 257, 2048]  # each band edge of kernels/nvidia/paroquant
KNOBS = ("RADIANCE_DISABLED_KERNELS", "RADIANCE_PQ_I8", "RADIANCE_PQ_SCRATCH_ROWS", "RADIANCE_PQ_DECODE_MAX_M",
         "RADIANCE_PDL", "TRITON_INTERPRET")

# the kernels each card must have built: the registries' kernels (kernels/nvidia/pq2, paroquant)
PQ2_EXPECT = {
    "sm_75": {"_quant_groups", "pq2_gemv_dp4a"},
    "sm_86": {"_quant_groups", "pq2_gemv_dp4a", "pq2_mma_gl", "pq2_planes_gemm", "pq2_legacy_gemm", "skinny_splitk_gemm"},
    "sm_90": {"pq2_gemv_dp4a", "pq2_mma_gl", "pq2_planes_gemm", "pq2_ws", "pq2_wgmma", "pq2_legacy_gemm"},
}
PARO_EXPECT = {  # the two CUDA-core GEMVs (what M = 1 runs with mma_gl disabled) on every card
    "sm_75": {"_rotate_kernel", "paro_gemv_gl", "_paro_gemv_kernel", "_dequant_kernel"},  # fp16 throughout: no cast
    "sm_86": {"_rotate_kernel", "_rotate_dense_kernel", "paro_mma_gl", "_paro_deqt_kernel", "_paro_deq_kernel",
              "_paro_fold_kernel", "_dequant_kernel", "_cast_kernel", "paro_gemv_gl", "_paro_gemv_kernel"},
    "sm_90": {"paro_mma_gl", "_paro_deqt_kernel", "paro_wgmma_f16", "_paro_fold_kernel", "_dequant_kernel",
              "paro_gemv_gl", "_paro_gemv_kernel"},
}


@pytest.fixture(autouse=True)
def _plain_knobs(monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    for k in KNOBS:
        monkeypatch.delenv(k, raising=False)


def _triton_version() -> str:
    import triton

    return triton.__version__


def _dtype(arch: str) -> torch.dtype:
    return torch.float16 if arch == "sm_75" else torch.bfloat16  # no bf16 below sm_80: vLLM serves fp16 there


def _check(built, arch: str, expect: set[str]) -> None:
    from radiance.testing.offline_compile import CARDS

    card = CARDS[arch]
    names = {b.kernel for b in built}
    problems = [f"the tables picked no {sorted(expect - names)} (built {sorted(names)})"] if expect - names else []
    problems += [f"{b} asks for more than the {card.smem} bytes of shared memory a block may have" for b in built
                 if b.shared > card.smem]
    # a register cap is a measured trade of spills for programs per SM (the tables cite the run)
    problems += [f"{b} spills registers to local memory" for b in built if b.local and not b.maxnreg]
    assert not problems, f"{arch} ({card.name}), Triton {_triton_version()}:\n" + "\n".join(problems)


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90"])
def test_pq2_kernels_compile_for(arch, monkeypatch):
    from radiance.kernels import pq2_ops
    from radiance.kernels.nvidia import dense
    from radiance.testing.offline_compile import compile_only

    # the plan as served, the exact test fixture and legacy alone (the last two: int8 MMA, sm_80+)
    plans = [{}] + ([{"exact": True}, {"only": "pq2.legacy"}] if arch != "sm_75" else [])
    with compile_only(arch) as built:
        for n, k in PQ2_SHAPES:
            for plan in plans:
                layer = pq2_ops.prepare(torch.zeros(n, k // 4, dtype=torch.uint8),
                                        torch.ones(n, k // 128, dtype=torch.float16), **plan)
                for m in PQ2_MS:
                    if n * k > 1 << 30 and m > 64:
                        continue  # lm_head prefill: the same tiles as gate_up's (kernels/nvidia/pq2), 5 GB of CPU activations
                    pq2_ops.forward(layer, torch.randn(m, k, dtype=_dtype(arch)))
        w = torch.zeros(96, 5120, dtype=_dtype(arch))  # the skinny unquantized projection, every M it covers
        plan = dense.plan(w)
        for m in range(1, 17):
            dense.linear(torch.randn(m, 5120, dtype=_dtype(arch)), w, plan)
    _check(built, arch, PQ2_EXPECT[arch])


def _paro_layer(sizes, k):
    """A paroquant linear of these partition sizes with all-zero codes and identity rotations:
    the shapes and formats the kernels compile for (values are irrelevant, nothing runs)."""
    from radiance.kernels import paro_ops
    from radiance.kernels.formats.paroquant import ParoTensors
    from radiance.testing import paro_random

    g = k // 128
    parts = [ParoTensors(torch.zeros(k, n // 8, dtype=torch.int32), torch.zeros(g, n // 8, dtype=torch.int32),
                         torch.ones(g, n, dtype=torch.float16), torch.arange(128, dtype=torch.int16).repeat(8, g),
                         torch.zeros(8, k // 2, dtype=torch.float16), torch.ones(1, k, dtype=torch.float16))
             for n in sizes]
    return paro_ops.prepare(*paro_random.merged(parts))


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90"])
def test_paroquant_kernels_compile_for(arch, monkeypatch):
    from radiance.kernels import paro_ops
    from radiance.testing.offline_compile import compile_only

    # W4A16 as shipped; W4A8 (int8 tensor cores: sm_80+); every prefill row on the fused GEMM;
    # the two CUDA-core GEMVs M = 1 falls back to
    gemv = "paroquant.mma_gl," if arch != "sm_75" else ""
    modes = [({}, PARO_MS)] \
        + ([({"RADIANCE_PQ_I8": "1"}, PARO_MS), ({"RADIANCE_DISABLED_KERNELS": "paroquant.scratch"}, PARO_MS)]
           if arch != "sm_75" else []) \
        + [({"RADIANCE_DISABLED_KERNELS": gemv}, [1]), ({"RADIANCE_DISABLED_KERNELS": gemv + "paroquant.gemv_gl"}, [1])]
    with compile_only(arch) as built:
        for mode, ms in modes:
            with monkeypatch.context() as knobs:
                for key, value in mode.items():
                    knobs.setenv(key, value)
                for sizes, k in PARO_SHAPES.values():
                    layer = _paro_layer(sizes, k)
                    for m in ms:
                        paro_ops.forward(layer, torch.randn(m, k, dtype=_dtype(arch)))
    _check(built, arch, PARO_EXPECT[arch])


PRODUCER_SITES = {"qkv_P3": "norm", "down": "silu_mul", "odd_n": "both"}  # the copies P are a grid axis


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90"])
def test_producer_kernels_compile_for(arch, monkeypatch):
    """The fused producers (kernels/triton/paro_producers.py) on every row count each runs fused,
    before the GEMMs they feed (W4A8 too on sm_86), their unfused kernels, and pq2's (its activation
    quantizer computing the norm or silu-mul)."""
    from radiance.kernels import paro_ops, pq2_ops
    from radiance.kernels.producers import AddRmsNorm, SiluMul
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton.paro_producers import FUSED_MAX_M
    from radiance.testing.offline_compile import compile_only

    dt = _dtype(arch)
    with compile_only(arch) as built:
        for i8 in ("0", "1") if arch == "sm_86" else ("0",):  # W4A8's int8 path: the users' sm_80+ card
            monkeypatch.setenv("RADIANCE_PQ_I8", i8)
            for name, site in PRODUCER_SITES.items():
                sizes, k = PARO_SHAPES[name]
                layer = _paro_layer(sizes, k)
                if site in ("norm", "both"):
                    for m in range(1, FUSED_MAX_M["norm"] + 1):
                        x = torch.randn(m, k, dtype=dt)
                        paro_ops.forward_produced(layer, AddRmsNorm(x, x, torch.ones(k, dtype=dt), 1e-6))
                        paro_ops.forward_produced(layer, AddRmsNorm(x, None, torch.ones(k, dtype=dt), 1e-6))
                if site in ("silu_mul", "both"):
                    for m in range(1, FUSED_MAX_M["silu_mul"] + 1):
                        paro_ops.forward_produced(layer, SiluMul(torch.randn(m, 2 * k, dtype=dt)))
        for k in (5120, 1280):  # the same ops unfused, above the bands (on CPU tensors plain() is the reference)
            x = torch.randn(40, k, dtype=dt)
            pp.add_norm(x, x, torch.ones(k, dtype=dt), 1e-6)
            pp.add_norm(x, None, torch.ones(k, dtype=dt), 1e-6)
            pp.silu_mul(torch.randn(40, 2 * k, dtype=dt))
        for k in (5120,):  # pq2's activation quantizer as the producer, both operand orders (K is no constexpr)
            x = torch.randn(1, k, dtype=dt)
            for planes in (True, False):
                for p in (AddRmsNorm(x, x, torch.ones(k, dtype=dt), 1e-6), AddRmsNorm(x, None, torch.ones(k, dtype=dt),
                          1e-6), SiluMul(torch.randn(3, 2 * k, dtype=dt))):
                    pq2_ops.quantize_activations(p.x if p.KIND == "norm" else p.gu, planes, producer=p)
    _check(built, arch, {"_add_norm_rotate_kernel", "_silu_mul_rotate_kernel", "_add_norm_kernel", "_silu_mul_kernel",
                         "_quant_groups"})
