"""The warm-up (kernels/warmup.py) compiles every kernel variant a layer can ever ask for.

vLLM's JIT monitor turns a Triton compile during a request into an error, so the warm-up's rows
must cover every variant the tables pick at any M: after warming, forwards at row counts above
warmup.ALL_M (odd, multiples of 16, the largest batches vLLM schedules) must compile nothing new.
Checked offline (radiance.testing.offline_compile: no GPU) for the lent H200 and the users' sm_86,
on the 27B benchmark shapes; the same check watches that every warmed constexpr is serializable
(vLLM's monitor sets a Triton compile hook, and Triton then JSON-serializes each kernel's constexprs).
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import ops, warmup
from radiance.kernels.warmup import LinearSpec

QKV, OUT, GATE_UP, DOWN = (5120, 1024, 1024), (5120,), (17408, 17408), (5120,)
SPECS = {
    "paroquant": [LinearSpec("paroquant", QKV, 5120, True, "bfloat16"), LinearSpec("paroquant", OUT, 5120, False, "bfloat16"),
                  LinearSpec("paroquant", GATE_UP, 5120, False, "bfloat16"),
                  LinearSpec("paroquant", DOWN, 17408, False, "bfloat16")],
    "pq2": [LinearSpec("pq2", (7168,), 5120, True, "bfloat16"), LinearSpec("pq2", (34816,), 5120, False, "bfloat16"),
            LinearSpec("pq2", (5120,), 17408, False, "bfloat16")],
    "dense": [LinearSpec("dense", (96,), 5120, False, "bfloat16")],
}
BEYOND = [1041, 1100, 2047, 2048, 4097, 8192]  # above ALL_M: must reuse what the warm-up built


def test_rows_cover_every_m_up_to_all_m_and_both_integer_classes_above():
    rows = warmup.warm_rows()
    assert rows[:warmup.ALL_M] == list(range(1, warmup.ALL_M + 1))
    above = rows[warmup.ALL_M:]
    assert any(m % 16 == 0 for m in above) and any(m % 16 for m in above) and min(above) > warmup.ALL_M


def test_spec_of_a_prepared_layer():
    k = 256
    rot = ops.Rotation(torch.arange(128, dtype=torch.int16).repeat(8, 2), torch.zeros(8, k // 2, dtype=torch.float16),
                       torch.ones(1, k, dtype=torch.float16))
    other = ops.Rotation(rot.pairs, torch.full((8, k // 2), 0.5, dtype=torch.float16), rot.channel_scales)
    n = [128, 128, 256]
    prep = ops.prepare("paroquant", {"qweight": torch.zeros(k, 64, dtype=torch.int32),
                                     "qzeros": torch.zeros(2, 64, dtype=torch.int32),
                                     "scales": torch.ones(2, 512, dtype=torch.float16)}, [rot, rot, other], n)
    assert warmup.spec_of(prep, None, torch.bfloat16) == LinearSpec("paroquant", (256, 256), k, False, "bfloat16")
    assert warmup.spec_of(prep, torch.zeros(512), torch.float16).bias


def test_mxfp4_layers_are_warmed_like_paroquant():
    # the launcher's build step makes MXFP4-PARO layers of the checkpoint's shapes and runs them at every row
    spec = LinearSpec("paroquant_mxfp4", (256, 128), 256, True, "bfloat16")
    prep = warmup.synthetic(spec, torch.device("cpu"))
    assert prep.method == "paroquant_mxfp4" and warmup.spec_of(prep, torch.zeros(384), torch.bfloat16) == spec
    warmup.warm(prep, spec, torch.device("cpu"), rows=[1, 3])


@pytest.mark.integration  # ~1-2 minutes per card when Triton's cache is cold
@pytest.mark.parametrize("arch", ["sm_90", "sm_86"])
@pytest.mark.parametrize("method", ["paroquant", "pq2", "dense"])
def test_warm_rows_leave_nothing_to_compile(arch, method, monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    from triton import knobs

    from radiance.testing.offline_compile import compile_only

    for k in ("RADIANCE_PQ_I8", "RADIANCE_DISABLED_KERNELS", "RADIANCE_PQ_DECODE_MAX_M", "RADIANCE_PDL", "TRITON_INTERPRET"):
        monkeypatch.delenv(k, raising=False)
    # what vLLM's JIT monitor does: any compile hook makes Triton serialize the kernel's constexprs
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", lambda **kw: None)
    cpu = torch.device("cpu")
    with compile_only(arch) as built:
        for i, spec in enumerate(SPECS[method]):
            prep = warmup.synthetic(spec, cpu, seed=i, platform="cuda")
            warmup.warm(prep, spec, cpu)
            warmed = len(built)
            warmup.warm(prep, spec, cpu, BEYOND)
            assert len(built) == warmed, f"{arch} {spec}: rows above {warmup.ALL_M} compiled {built[warmed:]}"
    assert built, f"{arch} {method}: the warm-up compiled nothing"
