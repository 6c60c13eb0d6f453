"""The real Qwen: a quantized layer's reference output against x . W_dequant^T, and the fixtures."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from radiance.kernels import reference as R
from radiance.kernels.formats import paroquant as P
from radiance.kernels.formats import pq2 as T
from radiance.quantize import rtn

pytestmark = pytest.mark.integration  # fetches the real model (minutes on a fresh machine)

LAYER = "model.layers.3.mlp.down_proj"  # K = 4864 = 38 groups


def test_real_layer_rotated_reference_matches_direct(qwen_bf16_dir):
    with safe_open(qwen_bf16_dir / "model.safetensors", "pt") as f:
        w = f.get_tensor(f"{LAYER}.weight")
    assert w.shape == (896, 4864) and w.dtype == torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    pairs, theta = rtn.random_rotation(4864, 8, gen)
    cs = torch.exp2((torch.rand(1, 4864, generator=gen) - 0.5) * 0.5).half()
    t = rtn.paroquant_linear_tensors(w, pairs, theta, cs)
    P.validate(t, LAYER)
    x = torch.randn(3, 4864, dtype=torch.float64, generator=gen)
    y_ref = R.paroquant_linear(x, t)
    # direct: the dense dequantized weight W_dq = dequant(Q) R diag(cs), by un-rotating its rows
    w_q = R.dequant_paroquant(t.qweight, t.qzeros, t.scales, dtype=torch.float64)
    w_dq = R.rotate(w_q, t.pairs.flip(0), -t.theta.flip(0)) * t.channel_scales.double()
    y_direct = x @ w_dq.t()
    assert ((y_ref - y_direct).norm() / y_direct.norm()) <= 1e-12
    y_true = x @ w.double().t()
    assert ((y_ref - y_true).norm() / y_true.norm()) < 0.15  # int4 RTN error on real weights (measured ~0.10)


def test_fixtures_are_valid_checkpoints(qwen_paro_dir, qwen_paro_identity_dir, qwen_pq2_dir):
    for d, method in ((qwen_paro_dir, "paroquant"), (qwen_paro_identity_dir, "paroquant"), (qwen_pq2_dir, "pq2")):
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["quantization_config"]["quant_method"] == method
        with safe_open(d / "model.safetensors", "pt") as f:
            keys = set(f.keys())
            prefix = "model.layers.0.self_attn.k_proj"
            state = {k: f.get_tensor(k) for k in keys if k.startswith(prefix)}
        assert f"{prefix}.bias" in keys and "lm_head.weight" in keys
        if method == "pq2":
            T.validate(T.Pq2Tensors.from_state(state, prefix), prefix)
        else:
            t = P.ParoTensors.from_state(state, prefix)
            P.validate(t, prefix)
            assert t.krot == cfg["quantization_config"]["krot"]
