"""radiance.checkpoint.verify: what `radiance setup` checks of a checkpoint it did not write.

Real checkpoints: the tiny Qwen2 quantized by radiance's own quantizer into each format (what the
plugin loads), the small Qwen from the model cache; each broken the way a download breaks.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from radiance.checkpoint import CheckpointError, linear_tensors, read_header, verify
from radiance.testing import tiny_model as tm
from radiance.testing.shape_only import write_headers

CFGS = {"paroquant": tm.PARO_CFG, "pq2": tm.PQ2_CFG, "paroquant_mxfp4": tm.MXFP4_CFG}


def _tiny(tmp_path: Path, quant: str) -> Path:
    return tm.write_checkpoint(tmp_path / quant, tm.quantize_state(tm.dense_state(), quant), CFGS[quant])


@pytest.mark.parametrize("quant", sorted(CFGS))
def test_radiance_written_checkpoints_fit_the_format_table(tmp_path, quant):
    """linear_tensors (the torch-free table setup checks against) is what the quantizer writes."""
    r = verify(_tiny(tmp_path, quant), quant)
    assert r.problems == [] and r.linears == tm.LAYERS * 7, r
    assert "14 quantized linears fit their format" in r.summary()


def test_the_small_qwen_as_downloaded(tmp_path, qwen_paro_dir):
    """z-lab's layout as radiance quantize writes it, without the files only radiance writes."""
    d = tmp_path / "dl"
    d.mkdir()
    for p in qwen_paro_dir.iterdir():
        if p.name not in ("SHA256SUMS", "radiance-quantize.json"):
            os.link(p, d / p.name)
    r = verify(d, "paroquant")
    assert r.problems == [] and r.linears == 24 * 7 and r.shards == 1, r
    assert verify(d, None).problems == []  # as a drafter: any format


def test_a_cut_short_shard_is_named(tmp_path):
    d = _tiny(tmp_path, "paroquant")
    shard = d / "model.safetensors"
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size - 1000)
    (problem,) = verify(d, "paroquant").problems
    assert problem.startswith(f"{shard}: tensor ") and "the file is cut short" in problem
    with shard.open("r+b") as f:
        f.truncate(100)
    (problem,) = verify(d, "paroquant").problems
    assert problem.startswith(f"{shard}: its header claims") and "not a safetensors file, or cut short" in problem
    shard.write_bytes(b"<html>rate limited</html>")
    (problem,) = verify(d, "paroquant").problems
    assert problem.startswith(f"{shard}: ")


def test_an_index_naming_what_is_not_there(tmp_path):
    d = _tiny(tmp_path, "pq2")
    names = list(read_header(d / "model.safetensors"))
    wm = {n: "model.safetensors" for n in names} | {"lm_head.extra": "model.safetensors",
                                                     "model.layers.9.x": "model-00002-of-00002.safetensors"}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    problems = verify(d, "pq2").problems
    assert f"{d / 'model.safetensors.index.json'} lists model-00002-of-00002.safetensors, which is not in {d}" in problems
    assert any("1 tensor(s) are not in the shard it names, e.g. lm_head.extra in model.safetensors" in p
               for p in problems), problems


def test_format_shapes_widths_and_config(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    cfg = tm.tiny_config(tm.PARO_CFG)
    (d / "config.json").write_text(json.dumps(cfg))
    q = "model.layers.0.self_attn.q_proj"
    t = {f"{q}.{k}": v for k, v in linear_tensors("paroquant", 256, 256, krot=4).items()}
    t[f"{q}.theta"] = ("F16", [4, 64])  # should be [4, 128]
    down = "model.layers.0.mlp.down_proj"
    t |= {f"{down}.{k}": v for k, v in linear_tensors("paroquant", 384, 512, krot=4).items()}  # N != hidden 256
    write_headers(d / "model.safetensors", t, zeros=True)
    problems = verify(d, "paroquant").problems
    assert f"{d / 'model.safetensors'}: {q}.theta is F16 [4, 64], paroquant needs F16 [4, 128] (N=256, K=256, krot=4)" in problems
    assert f"{d}: {down} writes N=384 features but config.json says hidden_size=256" in problems
    assert len(problems) == 2, problems
    (d / "config.json").write_text(json.dumps({**cfg, "quantization_config": {**tm.PARO_CFG, "bits": 3}}))
    assert any("paroquant reads bits=4, group_size=128; it says bits=3, group_size=128" in p
               for p in verify(d, "paroquant").problems)
    (d / "config.json").write_text(json.dumps({**cfg, "quantization_config": {**tm.PARO_CFG, "format_version": "2.0"}}))
    assert any("format_version is '2.0'" in p for p in verify(d, "paroquant").problems)
    assert any("is quantized as 'paroquant'" in p and "the stack says quant: pq2" in p for p in verify(d, "pq2").problems)


def test_no_weights_or_no_config(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    with pytest.raises(CheckpointError, match="has no config.json"):
        verify(d)
    (d / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match="cannot be read as JSON"):
        verify(d)
    (d / "config.json").write_text("{}")
    assert verify(d).problems == [f"{d} holds no weights (no *.safetensors, *.bin or *.pt)"]
    (d / "pytorch_model.bin").write_bytes(b"x")
    r = verify(d)
    assert r.problems == [] and "only safetensors headers can be checked" in r.summary()
    shutil.rmtree(d)
