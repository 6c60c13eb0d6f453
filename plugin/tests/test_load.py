"""Load tiny real checkpoints with vLLM's own loader (in process) and check every layer kind
against the reference: merged QKV (P=3) and gate_up (P=2), row-parallel, bias, dedup, skip."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import reference as R
from radiance.kernels.formats.paroquant import ParoTensors
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.formats.pq2 import Pq2Tensors

pytestmark = pytest.mark.integration  # real vLLM, in process

SITES = {  # vLLM module -> checkpoint projections it merges
    "self_attn.qkv_proj": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    "self_attn.o_proj": ["self_attn.o_proj"],
    "mlp.gate_up_proj": ["mlp.gate_proj", "mlp.up_proj"],
    "mlp.down_proj": ["mlp.down_proj"],
}


def _expected(state, method, layer, projs, x):
    outs = []
    for proj in projs:
        name = f"model.layers.{layer}.{proj}"
        bias = state.get(f"{name}.bias")
        if method == "paroquant":
            outs.append(R.paroquant_linear(x, ParoTensors.from_state(state, name), bias))
        elif method == "paroquant_mxfp4":
            outs.append(R.paroquant_mxfp4_linear(x, Mxfp4Tensors.from_state(state, name), bias))
        else:
            outs.append(R.pq2_linear(x, Pq2Tensors.from_state(state, name), bias))
    return torch.cat(outs, dim=-1)


@pytest.mark.parametrize("cpu_weights", ["fp32", "folded"])
@pytest.mark.parametrize("method, shared", [("paroquant", True), ("paroquant", False), ("pq2", False),
                                            ("paroquant_mxfp4", False)])
def test_every_layer_matches_the_reference(tmp_path, vllm_dist, tiny, method, shared, cpu_weights, monkeypatch):
    """The exact CPU path bit for bit; the folded one within its bf16 rounding (kernels/tests/test_ops.py)."""
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", cpu_weights)
    state = tiny.quantize_state(tiny.dense_state(), method, shared_qkv=shared)
    cfg = {"paroquant": tiny.PARO_CFG, "pq2": tiny.PQ2_CFG, "paroquant_mxfp4": tiny.MXFP4_CFG}[method]
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, cfg))
    gen = torch.Generator().manual_seed(5)
    for i in range(tiny.LAYERS):
        block = model.model.layers[i]
        for site, projs in SITES.items():
            mod = block.get_submodule(site)
            prep = mod._radiance_prep
            assert prep.method == method
            # the checkpoint tensors the prepared layer replaced are released (no second copy of the weights)
            released = {"paroquant": ("qweight", "qzeros", "scales"), "paroquant_mxfp4": ("weight", "weight_scale")}
            for name in released.get(method, ("qweight", "scales")):
                param = getattr(mod, name)
                assert param.numel() == 0 and param.dtype == state[f"model.layers.{i}.{projs[0]}.{name}"].dtype, name
            if method != "pq2":
                want_rot = 1 if shared or len(projs) == 1 else len(projs)
                assert len(prep.rotations) == want_rot, (site, [r for r in prep.runs])
            for m in (1, 7, 70):
                x = torch.randn(m, mod.input_size, generator=gen).bfloat16()
                y, _ = mod(x)
                want = _expected(state, method, i, projs, x)
                if cpu_weights == "fp32":
                    assert torch.equal(y, want), (site, m, (y.float() - want.float()).abs().max())
                else:
                    rel = float((y.float() - want.float()).norm() / want.float().norm())
                    assert rel < 1e-2, (site, m, rel)


def test_learned_checkpoint_loads_as_its_reference(vllm_dist, tiny, qwen_paro_learned_dir, monkeypatch):
    """A `--rotation learned` Qwen (learned angles, channel scales and fine-tuned codes) through vLLM's
    loader: every site of a decoder layer computes the reference of the checkpoint's own tensors."""
    from safetensors import safe_open

    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")  # the exact path: bit for bit
    model, _ = tiny.load_in_vllm(qwen_paro_learned_dir, dtype="float32")
    state = {}
    with safe_open(str(next(qwen_paro_learned_dir.glob("*.safetensors"))), "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys() if k.startswith("model.layers.3.")}
    gen = torch.Generator().manual_seed(3)
    for site, projs in SITES.items():
        mod = model.model.layers[3].get_submodule(site)
        x = torch.randn(5, mod.input_size, generator=gen)
        y, _ = mod(x)
        want = _expected(state, "paroquant", 3, projs, x)
        assert torch.equal(y, want), (site, (y - want).abs().max())
