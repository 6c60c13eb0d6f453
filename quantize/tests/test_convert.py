"""`radiance quantize` on a small synthetic Llama-style checkpoint: layout, config, identity, errors."""

from __future__ import annotations

import json
import subprocess
import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from typer.testing import CliRunner

from radiance.cli import app
from radiance.kernels import reference as R
from radiance.kernels.formats import paroquant as P
from radiance.kernels.formats import paroquant_mxfp4 as MX
from radiance.kernels.formats import pq2 as T
from radiance.quantize.convert import QuantizeError, QuantizeOptions, quantize_checkpoint

LINEARS = {"self_attn.q_proj": (256, 256), "self_attn.k_proj": (128, 256), "mlp.down_proj": (256, 384)}


@pytest.fixture()
def tiny_src(tmp_path) -> Path:
    g = torch.Generator().manual_seed(0)
    t = {"model.embed_tokens.weight": torch.randn(64, 256, generator=g).bfloat16(),
         "lm_head.weight": torch.randn(64, 256, generator=g).bfloat16(),
         "model.norm.weight": torch.ones(256).bfloat16(),
         "model.layers.0.input_layernorm.weight": torch.ones(256).bfloat16(),
         "model.layers.0.self_attn.q_proj.bias": torch.randn(256, generator=g).bfloat16()}
    for name, shape in LINEARS.items():
        t[f"model.layers.0.{name}.weight"] = (torch.randn(*shape, generator=g) * 0.05).bfloat16()
    src = tmp_path / "src"
    src.mkdir()
    save_file(t, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 256}))
    (src / "tokenizer.json").write_text("{}")
    return src


def _load(d: Path) -> dict[str, torch.Tensor]:
    with safe_open(d / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.mark.parametrize("rotation, krot", [("random", 8), ("identity", 1)])
def test_paroquant_layout_and_identity(tiny_src, tmp_path, rotation, krot):
    out = quantize_checkpoint(tiny_src, tmp_path / "out", QuantizeOptions("paroquant", rotation, krot, 3), progress=False)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": krot,
                                          "format_version": "1.0"}
    assert (out / "tokenizer.json").is_file()
    src, q = _load(tiny_src), _load(out)
    for kept in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.bias"):
        assert torch.equal(q[kept], src[kept])
    for name, (n, k) in LINEARS.items():
        prefix = f"model.layers.0.{name}"
        assert f"{prefix}.weight" not in q
        t = P.ParoTensors.from_state(q, prefix)
        P.validate(t, prefix)
        assert (t.out_features, t.in_features, t.krot) == (n, k, krot)
        x = torch.randn(4, k, dtype=torch.float64)
        w = src[f"{prefix}.weight"].double()
        rel = (R.paroquant_linear(x, t) - x @ w.t()).norm() / (x @ w.t()).norm()
        assert rel < 0.12, (name, float(rel))
        if rotation == "identity":
            assert t.theta.eq(0).all() and t.channel_scales.eq(1).all()
        else:
            assert t.theta.abs().max() > 1.0 and not t.channel_scales.eq(1).all()


def test_random_rotation_is_reproducible_and_seeded(tiny_src, tmp_path):
    a = _load(quantize_checkpoint(tiny_src, tmp_path / "a", QuantizeOptions("paroquant", seed=1), progress=False))
    b = _load(quantize_checkpoint(tiny_src, tmp_path / "b", QuantizeOptions("paroquant", seed=1), progress=False))
    c = _load(quantize_checkpoint(tiny_src, tmp_path / "c", QuantizeOptions("paroquant", seed=2), progress=False))
    key = "model.layers.0.self_attn.q_proj.pairs"
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


def test_pq2_layout(tiny_src, tmp_path):
    out = quantize_checkpoint(tiny_src, tmp_path / "out", QuantizeOptions("pq2"), progress=False)
    assert json.loads((out / "config.json").read_text())["quantization_config"] == {
        "quant_method": "pq2", "bits": 2, "group_size": 128, "format_version": "1.0"}
    q = _load(out)
    t = T.Pq2Tensors.from_state(q, "model.layers.0.mlp.down_proj")
    T.validate(t, "down_proj")
    assert t.qweight.shape == (256, 96) and t.scales.shape == (256, 3)
    assert set(q) >= {"model.layers.0.self_attn.q_proj.bias", "lm_head.weight"}


def test_mxfp4_layout_and_rotations_from_a_paroquant_checkpoint(tiny_src, tmp_path):
    """paroquant_mxfp4: OCP MXFP4 of rotate(W / cs), its own random rotations or a paroquant
    checkpoint's (--rotations-from), close to the bf16 model like int4 is."""
    donor = quantize_checkpoint(tiny_src, tmp_path / "paro", QuantizeOptions("paroquant", "random", 4, 7), progress=False)
    r = CliRunner().invoke(app, ["quantize", str(tiny_src), str(tmp_path / "mx"), "--format", "paroquant_mxfp4",
                                 "--krot", "4", "--rotations-from", str(donor)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "mx"
    cfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert cfg == {"quant_method": "paroquant_mxfp4", "bits": 4, "group_size": 32, "krot": 4, "format_version": "1.0"}
    rec = json.loads((out / "radiance-quantize.json").read_text())["options"]
    assert rec["rotations_from"] == str(donor.resolve())
    src, q, d = _load(tiny_src), _load(out), _load(donor)
    assert torch.equal(q["model.layers.0.self_attn.q_proj.bias"], src["model.layers.0.self_attn.q_proj.bias"])
    for name, (n, k) in LINEARS.items():
        prefix = f"model.layers.0.{name}"
        t = MX.Mxfp4Tensors.from_state(q, prefix)
        MX.validate(t, prefix)
        assert (t.out_features, t.in_features) == (n, k) and f"{prefix}.qweight" not in q
        for rot in ("pairs", "theta", "channel_scales"):
            assert torch.equal(q[f"{prefix}.{rot}"], d[f"{prefix}.{rot}"])
        x = torch.randn(4, k, dtype=torch.float64)
        w = src[f"{prefix}.weight"].double()
        rel = (R.paroquant_mxfp4_linear(x, t) - x @ w.t()).norm() / (x @ w.t()).norm()
        assert rel < 0.15, (name, float(rel))
    # the errors a user can make with it
    with pytest.raises(QuantizeError, match="give --krot 4"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant_mxfp4", krot=8, rotations_from=donor))
    with pytest.raises(QuantizeError, match="--rotations-from applies to --format paroquant_mxfp4 only"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant", rotations_from=donor))
    with pytest.raises(QuantizeError, match="quantized as 'pq2', not paroquant"):
        pq2 = quantize_checkpoint(tiny_src, tmp_path / "pq2", QuantizeOptions("pq2"), progress=False)
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant_mxfp4", rotations_from=pq2))
    with pytest.raises(QuantizeError, match="pass it as --rotations-from"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant_mxfp4", "learned"))
    assert not (tmp_path / "o").exists()


def test_output_carries_sha256sums_that_sha256sum_accepts(tiny_src, tmp_path):
    out = quantize_checkpoint(tiny_src, tmp_path / "out", QuantizeOptions("pq2"), progress=False)
    listed = sorted(line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines())
    assert listed == sorted(p.name for p in out.iterdir() if p.name != "SHA256SUMS")
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o644}, "a container's non-root user reads these"
    r = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (out / "config.json").write_text((out / "config.json").read_text() + " ")
    r = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert r.returncode == 1 and "config.json: FAILED" in r.stdout


def test_skip_regex_leaves_module_bf16(tiny_src, tmp_path):
    out = quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("pq2", skip=(r"k_proj$",)), progress=False)
    q = _load(out)
    assert q["model.layers.0.self_attn.k_proj.weight"].dtype == torch.bfloat16
    assert "model.layers.0.self_attn.q_proj.qweight" in q
    cfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert cfg["modules_to_not_convert"] == [r"k_proj$"]  # the plugin reads the skip list from here


def test_errors_name_the_problem(tiny_src, tmp_path):
    with pytest.raises(QuantizeError, match="--krot 9: must be between 1 and 8"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant", krot=9))
    with pytest.raises(QuantizeError, match="--rotation 'hadamard'"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("paroquant", rotation="hadamard"))
    with pytest.raises(QuantizeError, match=r"--skip '\(' is not a valid regex"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("pq2", skip=("(",)))
    with pytest.raises(QuantizeError, match="no linear layer left"):
        quantize_checkpoint(tiny_src, tmp_path / "o", QuantizeOptions("pq2", skip=(".",)))
    # a linear whose K is not a multiple of 128 is named, with the --skip that avoids it
    bad = tiny_src.parent / "bad"
    bad.mkdir()
    save_file({"model.layers.0.mlp.up_proj.weight": torch.zeros(128, 100).bfloat16()}, str(bad / "model.safetensors"))
    (bad / "config.json").write_text("{}")
    with pytest.raises(QuantizeError, match=re.escape("model.layers.0.mlp.up_proj.weight: in_features 100")):
        quantize_checkpoint(bad, tmp_path / "o", QuantizeOptions("pq2"))
    assert not (tmp_path / "o").exists()  # nothing half-written
    (bad / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq"}}))
    with pytest.raises(QuantizeError, match="already quantized \\(awq\\)"):
        quantize_checkpoint(bad, tmp_path / "o", QuantizeOptions("pq2"))


def test_cli_quantize(tiny_src, tmp_path):
    out = tmp_path / "cli-out"
    r = CliRunner().invoke(app, ["quantize", str(tiny_src), str(out), "--format", "paroquant",
                                 "--rotation", "identity", "--krot", "2", "--seed", "5"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "config.json").read_text())["quantization_config"]["krot"] == 2
    r = CliRunner().invoke(app, ["quantize", str(tiny_src), str(out), "--format", "int3"])
    assert r.exit_code == 2 and "--format 'int3'" in r.output


def test_sharded_source_keeps_shards_and_rewrites_index(tiny_src, tmp_path):
    state = _load(tiny_src)
    names = sorted(state)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((tiny_src / "config.json").read_text())
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(sharded / shard))
    index = {"metadata": {}, "weight_map": {k: s for s, ks in halves.items() for k in ks}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    out = quantize_checkpoint(sharded, tmp_path / "q", QuantizeOptions("pq2"), progress=False)
    new_index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(new_index.values()) == set(halves)
    for name, shard in new_index.items():
        with safe_open(out / shard, "pt") as f:
            assert name in f.keys()
    assert "model.layers.0.mlp.down_proj.qweight" in new_index and "model.layers.0.mlp.down_proj.weight" not in new_index


def test_device_cuda_without_gpu_is_refused(tiny_src, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    r = CliRunner().invoke(app, ["quantize", str(tiny_src), str(tmp_path / "o"), "--format", "pq2", "--device", "cuda"])
    assert r.exit_code == 2 and "--device cuda: no CUDA GPU is visible here" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["paroquant", "pq2"])
def test_device_cuda_matches_cpu(tiny_src, tmp_path, fmt):
    # the same codes up to float rounding order: at most a handful of ties land on the other code
    cpu = _load(quantize_checkpoint(tiny_src, tmp_path / "cpu", QuantizeOptions(fmt, "random", 8, 1), progress=False))
    gpu = _load(quantize_checkpoint(tiny_src, tmp_path / "gpu", QuantizeOptions(fmt, "random", 8, 1, device="cuda"),
                                    progress=False))
    assert cpu.keys() == gpu.keys()
    for name, t in cpu.items():
        assert t.dtype == gpu[name].dtype and t.shape == gpu[name].shape, name
        if t.dtype in (torch.int32, torch.uint8):
            assert (t != gpu[name]).float().mean() < 1e-3, name
        else:
            torch.testing.assert_close(t.float(), gpu[name].float(), rtol=1e-3, atol=1e-4)


def test_default_skip_keeps_the_hybrid_gates_and_quantizes_its_projections():
    from radiance.quantize.convert import DEFAULT_SKIP, is_quantized_linear

    skip = [re.compile(rx) for rx in DEFAULT_SKIP]
    layer = "model.layers.0.linear_attn."
    for gate in ("in_proj_a", "in_proj_b", "in_proj_ba"):  # Qwen3.5 / Qwen3-Next gated-delta-net gates
        assert not is_quantized_linear(layer + gate + ".weight", [32, 1024], skip)
    for proj in ("in_proj_qkvz", "in_proj_qkv", "in_proj_z", "out_proj"):
        assert is_quantized_linear(layer + proj + ".weight", [2048, 1024], skip)
    assert is_quantized_linear("model.layers.0.self_attn.q_proj.weight", [1024, 1024], skip)
