"""The kernels' knobs are resolved once, at load, into the layer's KernelConfig (kernels/config.py):
nothing under kernels/ reads the environment on a call, gfx1201's kernels are planned and disabled
by name like NVIDIA's, and every knob the kernels read keys the kernel build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from radiance.kernels import ops
from radiance.kernels.config import KNOB_OF, KernelConfig
from radiance.kernels.linear_spec import LinearSpec, build_flag
from radiance.knobs import KNOBS
from radiance.testing.paro_random import random_layer

KERNELS = Path(__file__).resolve().parents[1]
READS_ENV = re.compile(r"\bos\.environ\b|\bos\.getenv\b|\bknob(_int)?\(")
# where reading the environment is not a call of a prepared layer, and why
MAY_READ = {
    "config.py": "KernelConfig.from_knobs: the one read, at load",
    "build.py": "the launcher's kernel build (before vLLM starts)",
    "hip/build.py": "the gfx1201 build's compiler flags (before vLLM starts)",
    "warmup.py": "the launcher's warm-up process finds Triton's cache",
    "triton/__init__.py": "Triton's own TRITON_INTERPRET, read where the kernels are decorated (import)",
}


def test_nothing_under_kernels_reads_the_environment_after_load():
    readers = {str(p.relative_to(KERNELS)) for p in KERNELS.rglob("*.py")
               if "tests" not in p.parts and READS_ENV.search(p.read_text())}
    assert readers <= set(MAY_READ), f"read the knobs through the layer's KernelConfig: {sorted(readers - set(MAY_READ))}"


def _rocm_layer(**config) -> ops.PreparedLinear:
    parts = [random_layer(128, 256, torch.Generator().manual_seed(i)) for i in range(2)]
    return ops.prepare_parts("paroquant", parts, platform="rocm", config=KernelConfig(**config))


def test_a_layer_keeps_the_config_it_was_prepared_under(monkeypatch):
    from radiance.kernels.hip import ops as hip_ops

    monkeypatch.setenv("RADIANCE_PQ_DECODE_MAX_M", "16")
    prep = ops.prepare_parts("paroquant", [random_layer(128, 256, torch.Generator().manual_seed(0))], platform="rocm")
    assert prep.config.decode_max_m == 16 and hip_ops.op_args(prep.data["hip"])[-1] == 16
    monkeypatch.setenv("RADIANCE_PQ_DECODE_MAX_M", "32")  # later: the layer's custom op still splits at 16
    assert hip_ops.op_args(prep.data["hip"])[-1] == 16
    assert _rocm_layer(decode_max_m=8).data["hip"].decode_rows == 8


def test_gfx1201_kernels_are_planned_and_disabled_by_name():
    assert _rocm_layer().data["hip"].decode_rows == 64
    with pytest.raises(NotImplementedError, match=r"M=1\.\.64.*paroquant.hip_decode: disabled by RADIANCE_DISABLED"):
        _rocm_layer(disabled=frozenset({"paroquant.hip_decode"}))
    with pytest.raises(NotImplementedError, match=r"M=65\+?.*paroquant.hip_prefill: disabled"):
        _rocm_layer(disabled=frozenset({"paroquant.hip_prefill"}))
    with pytest.raises(NotImplementedError, match="hip_decode: takes at most 64 rows, RADIANCE_PQ_DECODE_MAX_M=65"):
        _rocm_layer(decode_max_m=65)
    with pytest.raises(NotImplementedError, match="dense.hipblas: disabled"):
        ops.prepare("dense", {"weight": torch.zeros(8, 128)}, platform="rocm",
                    config=KernelConfig(disabled=frozenset({"dense.hipblas"})))


def test_an_unknown_kernel_name_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"names paroquant\.nope, which no registry has; kernels: .*paroquant\.hip_decode"):
        _rocm_layer(disabled=frozenset({"paroquant.nope"}))


def test_every_knob_the_kernels_read_keys_the_kernel_build():
    # not the CPU's weight form (nothing is built for the CPU) nor where the gfx1201 library lies
    unbuilt = {"RADIANCE_CPU_WEIGHTS", "RADIANCE_KERNEL_DIR"}
    read = {knob for knob in KNOB_OF.values() if knob in KNOBS} - unbuilt
    assert {k for k in read if not KNOBS[k].kernels} == set()
    spec = [LinearSpec("pq2", (128,), 256, False, "bfloat16")]
    assert build_flag(spec, {"RADIANCE_PQ_DECODE_MAX_M": "32"}) != build_flag(spec, {})
    assert build_flag(spec, {"RADIANCE_PQ_CHECKALL": "8:8", "RADIANCE_SPEC": "3", "RADIANCE_HOME": "/x"}) \
        == build_flag(spec, {})
