"""Where the decode GEMMs launch dependent on their activation pass (kernels/pdl.py): the knob, the
capability gate and the tables' rules. The launches themselves are checked on the GPU
(test_pq2_gpu / test_paro_gpu: bit-identical with and without, back to back in a CUDA graph)."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import pdl, pq2_ops
from radiance.kernels.nvidia import paroquant as paro_table
from radiance.kernels.nvidia import pq2 as pq2_table
from radiance.kernels.config import KernelConfig
from radiance.kernels.nvidia.tile import Tile


@pytest.mark.parametrize("mode, cap, expected", [
    ("", (9, 0), True), ("auto", (9, 0), True), ("auto", (10, 0), True), ("auto", (8, 6), False),
    ("auto", (7, 5), False), ("on", (9, 0), True), ("off", (9, 0), False), ("off", (8, 6), False),
])
def test_enabled_by_mode_and_capability(mode, cap, expected, monkeypatch):
    monkeypatch.setenv(pdl.KNOB, mode)
    assert pdl.enabled(cap, KernelConfig.from_knobs().pdl) is expected


def test_on_below_sm90_is_an_error_naming_the_knob():
    with pytest.raises(ValueError, match=r"RADIANCE_PDL=on.*sm_86"):
        pdl.enabled((8, 6), "on")


def test_bad_value_is_an_error(monkeypatch):
    monkeypatch.setenv(pdl.KNOB, "yes")
    with pytest.raises(ValueError, match=r"RADIANCE_PDL='yes': use auto, on or off"):
        KernelConfig.from_knobs()


@pytest.mark.parametrize("tile, expected", [
    (Tile(bm=8, bn=128, warps=4, stages=4, split=2, kind="mma_gl"), True),  # gate_up at M = 1 on the H200
    (Tile(bm=8, bn=64, warps=2, stages=4, split=4, kind="mma_gl"), True),  # qkv
    (Tile(bm=8, bn=64, warps=2, stages=4, split=8, kind="mma_gl"), False),  # down: split 8 is slower with it
    (Tile(bm=16, bn=128, warps=4, stages=3, split=3, kind="mma_gl", persist=3), False),  # stream-K grid
    (Tile(bm=16, bn=64, warps=2, stages=3, split=2, kind="mma_gl"), False),  # qkv M = 9..16: lost 20 %
    (Tile(bm=1, bn=64, warps=4, stages=1, split=2, kind="gemv_gl"), False),  # only mma_gl waits for its prologue
])
def test_paroquant_rule(tile, expected):
    assert paro_table.launches_dependent(tile) is expected


@pytest.mark.parametrize("m, expected", [(1, {"gate_up", "qkv"}), (8, {"gate_up", "qkv"}), (9, set()), (16, set())])
def test_paroquant_h200_table_rows(m, expected):
    # the H200 decode table: gate_up and qkv launch dependent at M = 1..8, down and out never
    shapes = {"gate_up": (34816, 5120), "qkv": (14336, 5120), "down": (5120, 17408), "out": (5120, 6144)}
    assert {name for name, (n, k) in shapes.items()
            if paro_table.launches_dependent(paro_table.decode_tile("mma_gl", m, n, k // 128, 132, (9, 0)))} == expected


def _pq2_layer(**config):
    return pq2_ops.prepare(torch.zeros(128, 32, dtype=torch.uint8), torch.ones(128, 1, dtype=torch.float16),
                           config=KernelConfig(**config))


def test_pq2_rule_never_on_cpu():
    layer = _pq2_layer()
    for path in pq2_table.PDL_PATHS:
        assert not pq2_ops.launches_dependent(layer, path, 1)


def test_pq2_rule_decode_band_only():
    # on an sm_90 part: dp4a and gluon in the decode band, not planes (lost), nothing in prefill,
    # nothing with RADIANCE_PDL=off
    from radiance.kernels import gpu

    with gpu.virtual_gpu((9, 0), 132):  # CPU tensors standing for an H200 (kernels/gpu.virtual_gpu)
        layer = _pq2_layer()
        assert pq2_ops.launches_dependent(layer, "dp4a", 1) and pq2_ops.launches_dependent(layer, "gluon", 8)
        assert not pq2_ops.launches_dependent(layer, "planes", 16)
        assert not pq2_ops.launches_dependent(layer, "dp4a", 17)
        assert not pq2_ops.launches_dependent(layer, "gluon_wgmma", 64)
        assert not pq2_ops.launches_dependent(layer, "legacy", 1)
        assert not pq2_ops.launches_dependent(_pq2_layer(pdl="off"), "dp4a", 1)
    with gpu.virtual_gpu((8, 6), 82):  # no griddepcontrol below sm_90
        assert not pq2_ops.launches_dependent(_pq2_layer(), "dp4a", 1)


def test_pq2_other_paths_refuse_a_dependent_launch():
    layer = pq2_ops.prepare(torch.zeros(128, 32, dtype=torch.uint8), torch.ones(128, 1, dtype=torch.float16))
    q = torch.zeros(1, 128, dtype=torch.int8)
    a = torch.ones(1, 1)
    t = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(pq2_table.Pq2ConfigError, match="legacy: only dp4a, gluon launch dependent"):
        pq2_ops.gemm_quantized(layer, "legacy", pq2_table.Tile(bn=64), q, a, t, torch.empty(1, 128), pdl=True)


def test_launch_plan_names_every_constexpr_in_order():
    # the plan's direct launch passes constexprs positionally: a defaulted one left out (PDL,
    # TRIGGER) or a reordered dict would launch with shifted arguments; refused when the plan is made
    from types import SimpleNamespace as NS

    from radiance.kernels.launch import Launch

    fn = NS(__name__="k", params=[NS(name="X", is_constexpr=False), NS(name="BN", is_constexpr=True),
                                  NS(name="PDL", is_constexpr=True)])
    Launch(fn, {"BN": 64, "PDL": False}, 4, 1)
    with pytest.raises(TypeError, match=r"k: launch plan constexprs \['BN'\] must be exactly \['BN', 'PDL'\]"):
        Launch(fn, {"BN": 64}, 4, 1)
    with pytest.raises(TypeError, match="in order"):
        Launch(fn, {"PDL": False, "BN": 64}, 4, 1)
