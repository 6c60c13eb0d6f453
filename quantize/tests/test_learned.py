"""`radiance quantize --rotation learned` on CPU: the differentiable rotation is the reference's,
the exported tensors compute what the optimizer trained, and on a tiny real 2-layer Qwen the
layer losses go down and a killed-then-resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from radiance.cli import app
from radiance.kernels import reference as R
from radiance.kernels.formats import paroquant as P
from radiance.quantize import learned
from radiance.quantize.convert import QuantizeError, QuantizeOptions, quantize_checkpoint, single_thread
from radiance.quantize.evaluate import reference_linears
from radiance.quantize.learned_linear import LearnedLinear, disjoint_pairs
from radiance.quantize.learned_options import LearnedOptions
from radiance.testing.tiny_model import write_tiny_qwen

SMALL = {"samples": 8, "seq_len": 64, "epochs": 2}


def _opts(**kw) -> QuantizeOptions:
    return QuantizeOptions("paroquant", "learned", 4, 0, (), "cpu", LearnedOptions(**{**SMALL, **kw}))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_qwen(tmp_path_factory.mktemp("tiny") / "src")


@pytest.fixture(scope="module")
def tiny_learned(tiny, tmp_path_factory) -> Path:
    with single_thread():
        return quantize_checkpoint(tiny, tmp_path_factory.mktemp("learned") / "out", _opts(), progress=False)


def _trained_linear(k: int = 256, n: int = 64) -> LearnedLinear:
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
    m = LearnedLinear(lin, disjoint_pairs(k, 4, g))
    with torch.no_grad():
        m.theta.copy_((torch.rand(m.theta.shape, generator=g) * 2 - 1) * 3.1)
        m.log_inv_cs.copy_(torch.randn(k, generator=g) * 0.3)
    return m


def test_pairs_partition_every_group_and_never_repeat():
    k, krot = 384, 8
    pairs = disjoint_pairs(k, krot, torch.Generator().manual_seed(0))
    P.validate(P.ParoTensors(qweight=torch.zeros(k, 1, dtype=torch.int32), qzeros=torch.zeros(3, 1, dtype=torch.int32),
                             scales=torch.ones(3, 8, dtype=torch.float16), pairs=pairs,
                             theta=torch.zeros(krot, k // 2, dtype=torch.float16),
                             channel_scales=torch.ones(1, k, dtype=torch.float16)), "t")
    for g in range(k // 128):
        seen = {frozenset(p) for r in range(krot) for p in pairs[r, g * 128:(g + 1) * 128].view(-1, 2).tolist()}
        assert len(seen) == krot * 64  # 64 pairs per layer, none used twice in the group


def test_learned_rotation_is_the_reference_rotation():
    """Stage 1's differentiable form against reference.rotate (the gather sweep), float32:
    both are the same orthogonal sweep, summed in a different order -> 1e-5 absolute on O(1) values."""
    m = _trained_linear()
    x = torch.randn(5, 256)
    mats = m._mats()
    ours = R.apply_group_matrices(x * m.channel_scales(), mats)
    assert torch.allclose(ours, R.rotate(x, m.pairs, m.theta, m.channel_scales()), atol=1e-5)
    loss = ours.square().sum() + m.quantized_weight().sum()
    loss.backward()  # angles and scales get gradients through the rotation and the quantizer
    assert m.theta.grad.abs().sum() > 0 and m.log_inv_cs.grad.abs().sum() > 0


def test_exported_tensors_compute_what_stage_2_trained():
    """After stage 2, the LearnedLinear forward and reference.paroquant_linear on its packed
    tensors differ only by float32 summation order: 1e-4 relative to the output's scale."""
    m = _trained_linear()
    m.stage2_params()
    with torch.no_grad():
        m.w_rot.add_(torch.randn(m.w_rot.shape) * 1e-3)
        m.q_scale.mul_(1.01)
    t = m.packed()
    P.validate(t, "t")
    x = torch.randn(7, 256)
    with torch.no_grad():
        ours = m(x)
    ref = R.paroquant_linear(x, t, m.bias)
    assert (ours - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_tiny_qwen_losses_go_down_and_checkpoint_is_paroquant(tiny_learned):
    rec = json.loads((tiny_learned / "radiance-quantize.json").read_text())
    assert rec["options"]["learned"]["samples"] == 8 and rec["options"]["learned"]["device"] == "cpu"
    assert [r["layer"] for r in rec["learned_layers"]] == [0, 1]
    for r in rec["learned_layers"]:
        assert r["loss_after"] < 0.95 * r["loss_before"], r
    method, mods = reference_linears(tiny_learned, None)  # eval kl's loader: every format check
    assert method == "paroquant" and len(mods) == 14
    assert not learned.work_dir(tiny_learned).exists()


def test_resumed_run_equals_uninterrupted(tiny, tiny_learned, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = learned._optimize_layer

    def killed_at_layer_1(layer, index, *a):
        if index == 1:
            raise KeyboardInterrupt
        return real(layer, index, *a)

    monkeypatch.setattr(learned, "_optimize_layer", killed_at_layer_1)
    with single_thread(), pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(tiny, out, _opts(), progress=False)
    assert not out.exists() and (learned.work_dir(out) / "layer-000.safetensors").is_file()
    monkeypatch.setattr(learned, "_optimize_layer", real)
    with pytest.raises(QuantizeError, match="other settings.*epochs"):
        quantize_checkpoint(tiny, out, _opts(epochs=3, resume=True), progress=False)
    with single_thread():
        quantize_checkpoint(tiny, out, _opts(resume=True), progress=False)
    a, b = load_file(str(out / "model.safetensors")), load_file(str(tiny_learned / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rec = json.loads((out / "radiance-quantize.json").read_text())
    assert rec["options"] == json.loads((tiny_learned / "radiance-quantize.json").read_text())["options"]


def test_bad_input_is_refused_with_the_flag(tiny, tmp_path):
    cases = [
        (_opts(calib=str(tmp_path / "missing.txt")), "--calib .*missing.txt: no such file"),
        (_opts(seq_len=4096), "too short for --seq-len 4096"),
        (_opts(samples=6), "--samples 6: must be a multiple"),
        (QuantizeOptions("pq2", "learned"), "--rotation learned applies to --format paroquant"),
        (QuantizeOptions("paroquant", "random", learned=LearnedOptions()), "need --rotation learned"),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    cases.append((_opts(calib=str(empty)), "empty"))
    for opts, msg in cases:
        with pytest.raises(ValueError, match=msg):
            quantize_checkpoint(tiny, tmp_path / "out", opts, progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_learned_with_user_calibration_text(tiny, tmp_path):
    calib = tmp_path / "calib.txt"
    calib.write_text("def add(a, b):\n    return a + b\n\n" * 200)
    out = tmp_path / "out"
    args = ["quantize", str(tiny), str(out), "--format", "paroquant", "--rotation", "learned", "--krot", "2",
            "--calib", str(calib), "--samples", "4", "--seq-len", "32", "--epochs", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "radiance-quantize.json").read_text())["options"]["learned"]["calib"] == str(calib)
    bad = CliRunner().invoke(app, ["quantize", str(tiny), str(out), "--format", "paroquant", "--samples", "4"])
    assert bad.exit_code == 2 and "need --rotation learned" in bad.output
