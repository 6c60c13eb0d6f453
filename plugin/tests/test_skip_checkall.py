"""Skipped modules (skinny unquantized method) and RADIANCE_PQ_CHECKALL, through vLLM's loader."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from radiance.kernels.formats import FormatError

pytestmark = pytest.mark.integration  # real vLLM, in process


@pytest.fixture()
def radiance_log(caplog):
    """radiance's logger does not propagate (it has its own handler): listen on it directly."""
    logger = logging.getLogger("radiance.plugin")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="radiance.plugin")
    yield caplog
    logger.removeHandler(caplog.handler)


def _with_dense(tiny, state, dense, names):
    out = {k: v for k, v in state.items() if not any(k.startswith(n + ".") for n in names)}
    out.update({f"{n}.weight": dense[f"{n}.weight"] for n in names})
    return out


def test_skip_by_knob_and_by_checkpoint_list(tiny, tmp_path, vllm_dist, monkeypatch):
    from radiance.plugin.skip import SkinnyUnquantizedLinearMethod

    dense = tiny.dense_state()
    names = [f"model.layers.{i}.mlp.{p}" for i in range(tiny.LAYERS) for p in ("gate_proj", "up_proj")]
    names += [f"model.layers.{i}.self_attn.o_proj" for i in range(tiny.LAYERS)]
    state = _with_dense(tiny, tiny.quantize_state(dense, "paroquant"), dense, names)
    monkeypatch.setenv("RADIANCE_PQ_SKIP", r"mlp\.(gate|up)_proj")
    quant = {**tiny.PARO_CFG, "modules_to_not_convert": ["o_proj"]}
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, quant))
    layer = model.model.layers[1]
    x = torch.randn(3, tiny.H).bfloat16()
    for mod, parts in ((layer.mlp.gate_up_proj, ["gate_proj", "up_proj"]), (layer.self_attn.o_proj, None)):
        assert isinstance(mod.quant_method, SkinnyUnquantizedLinearMethod)
        if parts:
            w = torch.cat([dense[f"model.layers.1.mlp.{p}.weight"] for p in parts])
        else:
            w = dense["model.layers.1.self_attn.o_proj.weight"]
        y, _ = mod(x)
        assert torch.equal(y, torch.nn.functional.linear(x, w))
    assert layer.self_attn.qkv_proj._radiance_prep.method == "paroquant"


def test_dynamic_negative_keys_skip_and_other_overrides_are_refused(tiny, tmp_path, vllm_dist):
    """z-lab's `quantization_config.dynamic` (GPTQModel's convention): `-:regex` leaves a module in 16 bit."""
    from radiance.plugin.skip import SkinnyUnquantizedLinearMethod

    dense = tiny.dense_state()
    names = [f"model.layers.{i}.self_attn.o_proj" for i in range(tiny.LAYERS)]
    state = _with_dense(tiny, tiny.quantize_state(dense, "paroquant"), dense, names)
    quant = {**tiny.PARO_CFG, "dynamic": {r"-:.*\.o_proj": {}, r"+:.*mlp.*": {"bits": 4, "group_size": 128}}}
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, quant))
    layer = model.model.layers[0]
    assert isinstance(layer.self_attn.o_proj.quant_method, SkinnyUnquantizedLinearMethod)
    assert layer.mlp.down_proj._radiance_prep.method == "paroquant"
    quant["dynamic"] = {r"+:.*mlp.*": {"bits": 8}}
    with pytest.raises(ValueError, match=r"dynamic\['\+:\.\*mlp\.\*'\] overrides \{'bits': 8\}"):  # vLLM wraps it
        tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt2", state, quant))


def test_partial_skip_of_a_merged_layer_is_an_error(tiny, tmp_path, vllm_dist, monkeypatch):
    monkeypatch.setenv("RADIANCE_PQ_SKIP", r"mlp\.gate_proj")
    state = tiny.quantize_state(tiny.dense_state(), "paroquant")
    with pytest.raises(FormatError, match=r"only some of them are listed as unquantized"):
        tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PARO_CFG))


@pytest.mark.parametrize("method", ["paroquant", "pq2", "paroquant_mxfp4"])
def test_checkall_logs_rel_per_call_and_labels_zero_input(tiny, tmp_path, vllm_dist, monkeypatch, radiance_log, method):
    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "512:256,1024:256,256:512")
    monkeypatch.setenv("RADIANCE_PQ_CHECK_MAX_M", "4")
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")  # the exact path: rel is then summation order only
    state = tiny.quantize_state(tiny.dense_state(), method, shared_qkv=False)
    quant = {"paroquant": tiny.PARO_CFG, "pq2": tiny.PQ2_CFG, "paroquant_mxfp4": tiny.MXFP4_CFG}[method]
    codes, scales = ("weight", "weight_scale") if method == "paroquant_mxfp4" else ("qweight", "scales")
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, quant))
    layer = model.model.layers[0]
    layer.self_attn.qkv_proj(torch.zeros(2, tiny.H).bfloat16())
    for mod, k in ((layer.self_attn.qkv_proj, tiny.H), (layer.mlp.down_proj, tiny.I), (layer.self_attn.o_proj, tiny.H)):
        mod(torch.randn(9, k).bfloat16())
    lines = [r.getMessage() for r in radiance_log.records if r.getMessage().startswith("CHECKALL")]
    assert lines[0] == f"CHECKALL model.layers.0.self_attn.qkv_proj {method} N=512 K=256 M=2 zero-input"
    rels = {ln.split()[1]: [float(v) for v in re.findall(r"rel(?:_fp32)?=(\S+)", ln)] for ln in lines[1:]}
    assert set(rels) == {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.down_proj"}  # o_proj not gated
    # the judge reads the checkpoint tensors: kept where gated, released (the prepared copy serves) elsewhere
    qkv, down, o_proj = layer.self_attn.qkv_proj, layer.mlp.down_proj, layer.self_attn.o_proj
    assert getattr(qkv, codes).numel() > 0 and getattr(down, scales).numel() > 0
    assert getattr(o_proj, codes).numel() == 0 and getattr(o_proj, scales).numel() == 0
    assert all(rel <= 1e-4 for rel, _ in rels.values()), rels  # exact up to fp32 summation order
    assert all(0 < fp32 <= 3e-3 for _, fp32 in rels.values()), rels  # bf16 output rounding, nothing more


def test_checkall_call_budget(tiny, tmp_path, vllm_dist, monkeypatch, radiance_log):
    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "256:512")
    monkeypatch.setenv("RADIANCE_PQ_CHECK_MAX_CALLS", "2")
    state = tiny.quantize_state(tiny.dense_state(), "pq2")
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PQ2_CFG))
    down = model.model.layers[1].mlp.down_proj
    down(torch.zeros(1, tiny.I).bfloat16())
    for _ in range(4):
        down(torch.randn(2, tiny.I).bfloat16())
    lines = [r.getMessage() for r in radiance_log.records if r.getMessage().startswith("CHECKALL")]
    assert len(lines) == 3 and lines[0].endswith("zero-input") and all("rel=" in ln for ln in lines[1:])


def test_checkall_wrong_partition_mapping_is_caught(tiny, tmp_path, vllm_dist, monkeypatch, radiance_log):
    """The judge works per projection from the raw tensors: swapping two runs' rotations shows up
    (on the exact path, which applies the rotations per call; the folded one bakes them in at load)."""
    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "512:256")
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    state = tiny.quantize_state(tiny.dense_state(), "paroquant", shared_qkv=False)
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PARO_CFG))
    qkv = model.model.layers[0].self_attn.qkv_proj
    rots = qkv._radiance_prep.rotations
    rots[0], rots[1] = rots[1], rots[0]
    qkv(torch.randn(3, tiny.H).bfloat16())
    line = [r.getMessage() for r in radiance_log.records if "CHECKALL" in r.getMessage()][-1]
    rel = float(re.search(r" rel=(\S+)", line)[1])
    assert rel > 0.1


def test_checkall_needs_eager_and_a_valid_value(tiny, tmp_path, vllm_dist, monkeypatch):
    state = tiny.quantize_state(tiny.dense_state(), "pq2")
    ckpt = tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PQ2_CFG)
    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "512:256")
    with pytest.raises(ValueError, match="RADIANCE_PQ_CHECKALL is an eval-mode check: serve with --enforce-eager"):
        tiny.load_in_vllm(ckpt, enforce_eager=False)
    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "512x256")
    with pytest.raises(ValueError, match="expected comma-separated N:K pairs"):
        tiny.load_in_vllm(ckpt)


def test_checkall_runs_the_fused_producers_beside_the_unfused_path(tiny, tmp_path, vllm_dist, monkeypatch,
                                                                   radiance_log):
    """With the producer knobs, a gated linear fed straight by vLLM's RMSNorm or SiluAndMul also runs
    the fused site (ops.produced_forward) on that op's own inputs and logs it against the call it
    served (plugin/checkall_producers.py; bench/serve_compare.py judges the lines at 2e-3). On the CPU
    the fused path is the unfused reference (ops.unfused): it must agree to rounding with
    vLLM's own norm, keep the residual exact, and a fused path 1 % off must show."""
    from radiance.kernels import ops
    from radiance.plugin import checkall, checkall_producers

    monkeypatch.setenv("RADIANCE_PQ_CHECKALL", "512:256,1024:256,256:512")
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    state = tiny.quantize_state(tiny.dense_state(), "paroquant", shared_qkv=False)
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PARO_CFG))
    # the knobs are an error at a CPU load (nothing fuses there): set after it, the checkers made again
    monkeypatch.setenv("RADIANCE_PQ_ROT_STREAM", "1")
    monkeypatch.setenv("RADIANCE_PQ_ROT_STREAM2", "1")
    layer = model.model.layers[1]
    linears = (layer.self_attn.qkv_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj, layer.self_attn.o_proj)
    for mod in linears:
        lay, prep = mod._radiance_layout, mod._radiance_prep
        mod._radiance_check = checkall.checker(mod, lay, "paroquant", checkall.paroquant_exact, prep.out_features,
                                               prep.in_features, (True, True))
    try:
        def block(scale: float = 1.0):
            gen = torch.Generator().manual_seed(1)
            x, res = (scale * torch.randn(5, tiny.H, generator=gen).bfloat16() for _ in range(2))
            layer.self_attn.qkv_proj(layer.input_layernorm(x))
            h, _ = layer.post_attention_layernorm(x, res)
            gu, _ = layer.mlp.gate_up_proj(h)
            layer.mlp.down_proj(layer.mlp.act_fn(gu))
            layer.self_attn.o_proj(x)  # not gated: no line

        def lines():
            found = [r.getMessage() for r in radiance_log.records if " producer=" in r.getMessage()]
            radiance_log.clear()
            return {ln.split()[1].split(".")[-1]: ln for ln in found}

        block()
        seen = lines()
        assert set(seen) == {"qkv_proj", "gate_up_proj", "down_proj"}, seen
        assert "producer=norm" in seen["qkv_proj"] and "residual=none" in seen["qkv_proj"]
        assert "producer=norm" in seen["gate_up_proj"] and "residual=exact" in seen["gate_up_proj"]
        assert "producer=silu_mul" in seen["down_proj"]
        rels = {k: float(re.search(r"fused_rel=(\S+)", v)[1]) for k, v in seen.items()}
        assert all(r <= 2e-3 for r in rels.values()), rels  # vLLM's norm and the reference: rounding only

        unfused = ops.unfused  # the CPU's "produced" entry (kernels/methods)
        monkeypatch.setattr(ops, "unfused", lambda prep, p, bias: 1.01 * unfused(prep, p, bias))
        block(2.0)
        rels = {k: float(re.search(r"fused_rel=(\S+)", v)[1]) for k, v in lines().items()}
        assert len(rels) == 3 and all(0.009 < r < 0.011 for r in rels.values()), rels
    finally:
        checkall_producers.uninstall()
