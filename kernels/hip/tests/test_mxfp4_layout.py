"""mxfp4_layout.prepare against kernels/reference.py on the CPU, read the way pq_mxfp4_gemm.hip reads
it (kernels/hip/mxfp4_emulate.py): codes through the int4 packing, the fold's per-block e4m3 table
and per-column power of two, the per-block fallback, the per-token prefill scaling, boundaries.

Tolerance: the emulation and the reference multiply the same e4m3 activation codes by the same
(exactly representable) weights; only the order of the fp32 sums differs, so 1e-5 relative."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import reference
from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors, pack_e2m1, unpack_e2m1
from radiance.kernels.hip import emulate, mxfp4_emulate
from radiance.kernels.hip.mxfp4_layout import FOLD_DMIN, FOLD_TOP, fold_holds, prepare, prepare_merged, weight_codes
from radiance.kernels.linear import Rotation
from radiance.testing.mxfp4_random import random_layer, reference_merged
from radiance.testing.paro_random import rel, runs_of

TOL = 1e-5  # fp32 summation order only (module docstring)


def _layer(n, k, seed, krot=8, e_spread=3):
    return random_layer(n, k, torch.Generator().manual_seed(seed), krot=krot, e_spread=e_spread)


def _act(per_token: bool) -> str:
    return "fp8_token" if per_token else "fp8_group"


def _with_low_block(t: Mxfp4Tensors, below: int) -> Mxfp4Tensors:
    """t with block 1 of column 0 set `below` binades under that column's largest exponent (its
    codes made nonzero so the block counts)."""
    scale, codes = t.weight_scale.clone(), unpack_e2m1(t.weight)
    scale[0, 1] = int(scale[0].max()) - below
    codes[0, 32:64] = 7  # 6.0 everywhere in the block
    return Mxfp4Tensors(pack_e2m1(codes), scale, t.pairs, t.theta, t.channel_scales)


@pytest.mark.parametrize("wperm", [True, False])
def test_codes_round_trip_and_shapes(wperm):
    t = _layer(80, 384, 0)
    prep = prepare([t], wperm=wperm)
    assert torch.equal(weight_codes(prep), unpack_e2m1(t.weight))
    assert prep.wq.shape == ((80 // 16, 384 // 16, 32) if wperm else (80, 384 // 8))
    assert prep.ex.shape == (3, 80) and prep.ex.dtype == torch.int32 and prep.rsc.shape == (80,)
    assert not prep.per_block


def test_fold_operand_times_column_power_is_the_weight_exactly():
    t = _layer(64, 256, 1, e_spread=5)
    prep = prepare([t])
    assert not prep.per_block
    w = mxfp4_emulate.operand(prep) * prep.rsc[:, None]
    assert torch.equal(w, reference.dequant_mxfp4(t.weight, t.weight_scale))


def test_per_block_operand_times_block_scale_is_the_weight_exactly():
    t = _layer(64, 256, 2)
    prep = prepare([t], per_block=True)
    assert prep.per_block and torch.equal(prep.rsc, torch.ones(64))
    w = mxfp4_emulate.operand(prep) * mxfp4_emulate.block_scales(prep).repeat_interleave(32, dim=1)
    assert torch.equal(w, reference.dequant_mxfp4(t.weight, t.weight_scale))


@pytest.mark.parametrize("mode", ["fold", "per_block", "wide_spread"])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("m", [1, 7])
def test_gemm_matches_reference_same_activation_quant(mode, per_token, m):
    # odd shapes: N = 48 (three 16-column tiles, not a whole 64-column workgroup), K = 384
    t = _layer(48, 384, 3, krot=5, e_spread=20 if mode == "wide_spread" else 3)
    prep = prepare([t], per_block=True if mode == "per_block" else None)
    assert prep.per_block == (mode != "fold")
    x = torch.randn(m, 384, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    a, asr = emulate.rotate_quant(x, prep, per_token)
    y = mxfp4_emulate.gemm(a, asr, prep, per_token=per_token)
    assert rel(y, reference_merged(x, [t], act=_act(per_token))) < TOL


def test_rotate_quant_is_the_int4_paths_codes():
    """The activation side is shared: the same records give the reference quantizer's bytes."""
    t = _layer(32, 256, 5, krot=3)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    a, asr = emulate.rotate_quant(x, prepare([t]), per_token=False)
    q, scale = reference.quant_fp8_e4m3_group(reference.rotate(x, t.pairs, t.theta, t.channel_scales))
    want = q.view(torch.uint8).clone()
    want[want == 0x80] = 0
    assert torch.equal(a[0], want) and torch.equal(asr[0, :, :, 0], scale)


def test_merged_linear_dedups_adjacent_rotations_and_selects_by_boundary():
    q, k_, v = _layer(96, 256, 7), _layer(64, 256, 8), _layer(48, 256, 9)
    v.pairs, v.theta, v.channel_scales = k_.pairs, k_.theta, k_.channel_scales  # k and v share one rotation
    prep = prepare([q, k_, v])
    assert prep.rotations == 2 and (prep.pb1, prep.pb2) == (96, 1 << 30)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(10))
    a, asr = emulate.rotate_quant(x, prep, per_token=True)
    assert rel(mxfp4_emulate.gemm(a, asr, prep, per_token=True), reference_merged(x, [q, k_, v], "fp8_token")) < TOL


def test_three_rotations_through_prepare_merged():
    parts = [_layer(96, 384, 11), _layer(64, 384, 12), _layer(48, 384, 13)]
    w = torch.cat([t.weight for t in parts])
    s = torch.cat([t.weight_scale for t in parts])
    prep = prepare_merged(w, s, [Rotation.of(t) for t in parts], runs_of([96, 64, 48]))
    assert prep.rotations == 3 and (prep.pb1, prep.pb2) == (96, 160)
    x = torch.randn(9, 384, generator=torch.Generator().manual_seed(14))
    a, asr = emulate.rotate_quant(x, prep, per_token=False)
    assert rel(mxfp4_emulate.gemm(a, asr, prep), reference_merged(x, parts, "fp8_group")) < TOL


def test_fold_window_edges_choose_the_kernels():
    t = _layer(32, 256, 15)
    inside = _with_low_block(t, FOLD_TOP - FOLD_DMIN)  # d = -5: the window's last binade
    outside = _with_low_block(t, FOLD_TOP - FOLD_DMIN + 1)
    assert fold_holds(inside.weight, inside.weight_scale) and not prepare([inside]).per_block
    assert not fold_holds(outside.weight, outside.weight_scale) and prepare([outside]).per_block
    with pytest.raises(FormatError, match="per_block=None"):
        prepare([outside], per_block=False)
    for tt in (inside, outside):  # both exact
        prep = prepare([tt])
        x = torch.randn(4, 256, generator=torch.Generator().manual_seed(16))
        a, asr = emulate.rotate_quant(x, prep, per_token=False)
        assert rel(mxfp4_emulate.gemm(a, asr, prep), reference_merged(x, [tt], "fp8_group")) < TOL


def test_zero_blocks_and_zero_columns_do_not_break_the_fold():
    t = _layer(32, 256, 17)
    codes, scale = unpack_e2m1(t.weight), t.weight_scale.clone()
    codes[0, :32] = 8  # -0 everywhere: a dead block, its exponent far below the column's
    scale[0, 0] = 0
    codes[5] = 0  # an all-zero column
    tz = Mxfp4Tensors(pack_e2m1(codes), scale, t.pairs, t.theta, t.channel_scales)
    prep = prepare([tz])
    assert not prep.per_block
    want = reference.dequant_mxfp4(tz.weight, tz.weight_scale)
    assert torch.equal(mxfp4_emulate.operand(prep) * prep.rsc[:, None], want)


def test_prepare_refuses_what_the_gemm_cannot_take():
    with pytest.raises(FormatError, match="boundary 16 must be a multiple of 32"):
        prepare([_layer(16, 128, 20), _layer(32, 128, 21)])
    with pytest.raises(FormatError, match="takes 1..3 rotations"):
        prepare([_layer(32, 128, s) for s in range(22, 26)])
    with pytest.raises(FormatError, match="share K"):
        prepare([_layer(32, 128, 26), _layer(32, 256, 27)])
    t = _layer(40, 128, 28)
    with pytest.raises(FormatError, match="multiple of 16"):
        prepare([t])
    t = _layer(32, 128, 29)
    bad = t.weight_scale.clone()
    bad[3, 1] = 255
    with pytest.raises(FormatError, match="NaN"):
        prepare_merged(t.weight, bad, [Rotation.of(t)], runs_of([32]))
