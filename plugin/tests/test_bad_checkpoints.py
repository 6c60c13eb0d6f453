"""Bad checkpoints fail the load with a message naming the key / tensor and the expectation.

Each one goes through vLLM's real config parsing and weight loader (in process), the path the
server takes."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels.formats import FormatError

pytestmark = pytest.mark.integration  # real vLLM, in process


@pytest.fixture(scope="module")
def paro_state(tiny):
    return tiny.quantize_state(tiny.dense_state(), "paroquant")


def _load(tiny, tmp_path, state, quant, **cfg_over):
    d = tiny.write_checkpoint(tmp_path / "ckpt", state, quant)
    if cfg_over:
        import json

        cfg = json.loads((d / "config.json").read_text())
        cfg.update(cfg_over)
        (d / "config.json").write_text(json.dumps(cfg))
    return tiny.load_in_vllm(d)


@pytest.mark.parametrize("override, message", [
    ({"bits": 8}, "quantization_config: paroquant bits must be 4, got 8"),
    ({"group_size": 64}, "quantization_config: paroquant group_size must be 128, got 64"),
    ({"krot": 9}, "quantization_config: paroquant krot must be between 1 and 8, got 9"),
    ({"bits": "4"}, r"quantization_config.bits='4': paroquant needs an integer"),
    ({"format_version": "2.0"}, r"quantization_config.format_version is '2.0', but this radiance reads format 1.x"),
])
def test_bad_paroquant_config(tiny, tmp_path, vllm_dist, paro_state, override, message):
    with pytest.raises(Exception, match=message):
        _load(tiny, tmp_path, paro_state, {**tiny.PARO_CFG, **override})


def test_bad_pq2_config(tiny, tmp_path, vllm_dist):
    state = tiny.quantize_state(tiny.dense_state(), "pq2")
    with pytest.raises(Exception, match="quantization_config: pq2 bits must be 2, got 3"):
        _load(tiny, tmp_path, state, {**tiny.PQ2_CFG, "bits": 3})


def test_misaligned_partition(tiny, tmp_path, vllm_dist, paro_state):
    # down_proj's K = intermediate_size = 320 cannot hold whole 128-groups
    with pytest.raises(FormatError, match=r"model.layers.0.mlp.down_proj: in_features 320 is not a multiple of the 128-group"):
        _load(tiny, tmp_path, paro_state, tiny.PARO_CFG, intermediate_size=320)


def test_partition_not_packable(vllm_dist):
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    from radiance.plugin.paroquant import ParoQuantConfig

    cfg = ParoQuantConfig(4, 128, 4)
    cfg.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    with set_current_vllm_config(VllmConfig()), pytest.raises(
            FormatError, match=r"mlp.up_proj: 100 output columns on this rank \(tp=1\) is not a multiple of 8"):
        MergedColumnParallelLinear(256, [128, 100], bias=False, quant_config=cfg, prefix="mlp.gate_up_proj")


def test_missing_tensor_of_one_merged_projection(tiny, tmp_path, vllm_dist, paro_state):
    state = dict(paro_state)
    del state["model.layers.1.self_attn.k_proj.theta"]  # q and v still fill qkv_proj.theta
    with pytest.raises(FormatError, match=r"missing from the checkpoint: model.layers.1.self_attn.k_proj.theta"):
        _load(tiny, tmp_path, state, tiny.PARO_CFG)


def test_missing_tensor_of_a_whole_layer(tiny, tmp_path, vllm_dist, paro_state):
    state = dict(paro_state)
    del state["model.layers.0.self_attn.o_proj.qzeros"]
    with pytest.raises(Exception, match=r"o_proj.qzeros"):
        _load(tiny, tmp_path, state, tiny.PARO_CFG)


@pytest.mark.parametrize("name, dtype, message", [
    ("model.layers.0.mlp.up_proj.scales", torch.float32,
     r"model.layers.0.mlp.up_proj.scales: expected shape \[2, 512\] torch.float16, got \[2, 512\] torch.float32"),
    ("model.layers.1.self_attn.o_proj.pairs", torch.int32,
     r"model.layers.1.self_attn.o_proj.pairs: expected shape \[4, 256\] torch.int16, got \[4, 256\] torch.int32"),
])
def test_wrong_dtype(tiny, tmp_path, vllm_dist, paro_state, name, dtype, message):
    state = dict(paro_state)
    state[name] = state[name].to(dtype)
    with pytest.raises(FormatError, match=message):
        _load(tiny, tmp_path, state, tiny.PARO_CFG)


def test_wrong_krot_in_tensors(tiny, tmp_path, vllm_dist, paro_state):
    with pytest.raises(FormatError, match=r"_proj.pairs: expected shape \[3, \d+\] torch.int16, got \[4, \d+\]"):
        _load(tiny, tmp_path, paro_state, {**tiny.PARO_CFG, "krot": 3})


def test_pairs_that_leave_their_group(tiny, tmp_path, vllm_dist, paro_state):
    state = dict(paro_state)
    pairs = state["model.layers.0.mlp.down_proj.pairs"].clone()
    pairs[2, 130] = pairs[2, 131]  # group 1 of layer 2 is no longer a permutation
    state["model.layers.0.mlp.down_proj.pairs"] = pairs
    with pytest.raises(FormatError, match=r"model.layers.0.mlp.down_proj.pairs: rotation layer 2, group 1"):
        _load(tiny, tmp_path, state, tiny.PARO_CFG)


def test_pq2_wrong_dtype_and_bad_code(tiny, tmp_path, vllm_dist):
    state = tiny.quantize_state(tiny.dense_state(), "pq2")
    bad = dict(state)
    bad["model.layers.0.self_attn.v_proj.qweight"] = bad["model.layers.0.self_attn.v_proj.qweight"].to(torch.int8)
    with pytest.raises(FormatError, match=r"v_proj.qweight: expected shape \[128, 64\] torch.uint8, got \[128, 64\] torch.int8"):
        _load(tiny, tmp_path, bad, tiny.PQ2_CFG)
    bad = dict(state)
    q = bad["model.layers.1.mlp.gate_proj.qweight"].clone()
    q[3, 5] = 0xFF
    bad["model.layers.1.mlp.gate_proj.qweight"] = q
    with pytest.raises(FormatError, match=r"model.layers.1.mlp.gate_proj.qweight: invalid ternary code 3 in row 3"):
        _load(tiny, tmp_path / "b", bad, tiny.PQ2_CFG)
