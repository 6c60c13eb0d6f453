"""`radiance eval kl`: the swapped-in reference linears, the errors, and the real Qwen."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from radiance.kernels import reference as R
from radiance.kernels.formats import paroquant as P
from radiance.kernels.formats import paroquant_mxfp4 as MX
from radiance.quantize import evaluate as E
from radiance.quantize.convert import QuantizeOptions, quantize_checkpoint


def _tiny(tmp_path):
    g = torch.Generator().manual_seed(0)
    src = tmp_path / "src"
    src.mkdir()
    save_file({"model.layers.0.mlp.up_proj.weight": torch.randn(128, 256, generator=g).bfloat16(),
               "model.layers.0.mlp.up_proj.bias": torch.randn(128, generator=g).bfloat16()},
              str(src / "model.safetensors"))
    (src / "config.json").write_text("{}")
    return src


def test_reference_linear_is_the_reference(tmp_path):
    out = quantize_checkpoint(_tiny(tmp_path), tmp_path / "q", QuantizeOptions("paroquant", krot=4), progress=False)
    method, mods = E.reference_linears(out, None)
    assert method == "paroquant" and list(mods) == ["model.layers.0.mlp.up_proj"]
    with safe_open(out / "model.safetensors", "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    t = P.ParoTensors.from_state(state, "model.layers.0.mlp.up_proj")
    x = torch.randn(3, 256)
    want = R.paroquant_linear(x, t, bias=state["model.layers.0.mlp.up_proj.bias"])
    assert torch.allclose(mods["model.layers.0.mlp.up_proj"](x), want, rtol=1e-5, atol=1e-5)
    assert E.source_of(out) == (tmp_path / "src").resolve()
    _, fp8 = E.reference_linears(out, "fp8_token")
    y8 = fp8["model.layers.0.mlp.up_proj"](x)
    assert not torch.equal(y8, want) and (y8 - want).norm() / want.norm() < 0.05  # e4m3 rounding only


def test_mxfp4_reference_linear_is_the_reference(tmp_path):
    out = quantize_checkpoint(_tiny(tmp_path), tmp_path / "q", QuantizeOptions("paroquant_mxfp4", krot=4),
                              progress=False)
    method, mods = E.reference_linears(out, None)
    assert method == "paroquant_mxfp4" and list(mods) == ["model.layers.0.mlp.up_proj"]
    with safe_open(out / "model.safetensors", "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    t = MX.Mxfp4Tensors.from_state(state, "model.layers.0.mlp.up_proj")
    x = torch.randn(3, 256)
    want = R.paroquant_mxfp4_linear(x, t, bias=state["model.layers.0.mlp.up_proj.bias"])
    assert torch.allclose(mods["model.layers.0.mlp.up_proj"](x), want, rtol=1e-5, atol=1e-5)


def test_errors(tmp_path):
    src = _tiny(tmp_path)
    with pytest.raises(E.EvalError, match="no quantization_config"):
        E.reference_linears(src, None)
    (src / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq"}}))
    with pytest.raises(E.EvalError, match="quant_method 'gptq'"):
        E.reference_linears(src, None)
    with pytest.raises(E.EvalError, match="radiance-quantize.json"):
        E.source_of(src)
    with pytest.raises(E.EvalError, match="--act 'int4'"):
        E.kl_report(src, src, act="int4")


def test_corpus_is_shipped_and_chunked():
    texts = E.corpus_texts()
    assert set(texts) == {"prose.txt", "code.txt"} and all(len(t) > 4000 for t in texts.values())

    class Whitespace:  # a tokenizer stand-in: one id per word
        def __call__(self, text, return_tensors):
            class Out:
                input_ids = torch.arange(len(text.split())).unsqueeze(0)
            return Out()

    chunks = E.corpus_chunks(Whitespace(), 100, 50)
    assert chunks and all(len(c) == 100 for c in chunks)
    assert len(E.corpus_chunks(Whitespace(), 100, 3)) == 3


@pytest.mark.integration
def test_real_qwen_kl(qwen_paro_identity_dir, qwen_bf16_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_bf16_dir)
    model = AutoModelForCausalLM.from_pretrained(qwen_bf16_dir, dtype=torch.float32).eval()
    chunks = E.corpus_chunks(tok, 48, 1)
    _, mods = E.reference_linears(qwen_paro_identity_dir, None)
    q = E.compare(model, mods, chunks)
    assert 0.001 < q["kl_mean"] < 0.5 and q["top1"] > 0.7 and q["positions"] == 48
    # the harness itself: swapping in the model's own weights gives KL ~ 0 and full agreement
    same = {name: E.ReferenceLinear(model.get_submodule(name).weight.detach, model.get_submodule(name).bias)
            for name in mods}
    s = E.compare(model, same, chunks)
    assert s["kl_mean"] < 1e-6 and s["top1"] == 1.0
