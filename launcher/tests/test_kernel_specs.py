"""The checkpoint -> warm-up shapes step reads what vLLM will prepare on one rank."""

from __future__ import annotations

import pytest

from radiance.kernels.linear_spec import LinearSpec
from radiance.launcher.kernel_specs import SpecError, linear_specs
from radiance.testing import tiny_model as tm

BF16 = "bfloat16"


def _ckpt(tmp_path, method: str, shared: bool = False):
    dense = tm.dense_state()
    cfg = tm.PARO_CFG if method == "paroquant" else tm.PQ2_CFG
    return tm.write_checkpoint(tmp_path / method, tm.quantize_state(dense, method, shared_qkv=shared), cfg)


def test_paroquant_distinct_rotations_per_partition(tmp_path):
    d = _ckpt(tmp_path, "paroquant")
    assert linear_specs(d, "paroquant", 1) == [
        LinearSpec("paroquant", (256,), 256, False, BF16),  # o_proj
        LinearSpec("paroquant", (256,), 512, False, BF16),  # down_proj
        LinearSpec("paroquant", (256, 128, 128), 256, True, BF16),  # qkv: three rotations, bias
        LinearSpec("paroquant", (512, 512), 256, False, BF16),  # gate_up
    ]


def test_paroquant_shared_rotation_is_one_run_and_tp_splits(tmp_path):
    d = _ckpt(tmp_path, "paroquant", shared=True)
    assert linear_specs(d, "paroquant", 2, "float16") == [
        LinearSpec("paroquant", (256,), 128, False, "float16"),  # o_proj: K split over 2 ranks
        LinearSpec("paroquant", (256,), 256, False, "float16"),  # down_proj: K split
        LinearSpec("paroquant", (256,), 256, True, "float16"),  # qkv: one shared rotation, N split
        LinearSpec("paroquant", (512,), 256, False, "float16"),  # gate_up
    ]


def test_pq2(tmp_path):
    d = _ckpt(tmp_path, "pq2")
    assert linear_specs(d, "pq2", 1) == [
        LinearSpec("pq2", (256,), 256, False, BF16), LinearSpec("pq2", (256,), 512, False, BF16),
        LinearSpec("pq2", (512,), 256, True, BF16), LinearSpec("pq2", (1024,), 256, False, BF16)]


def test_a_directory_without_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpecError, match="no \\*.safetensors weights"):
        linear_specs(tmp_path, "paroquant", 1)
