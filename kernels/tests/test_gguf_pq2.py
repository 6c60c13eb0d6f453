"""PQ2_0 GGUF import, on GGUF files written here with gguf-py's GGUFWriter (raw bytes for type 142)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

gguf = pytest.importorskip("gguf")

from radiance.kernels import reference as R  # noqa: E402
from radiance.kernels.formats import FormatError  # noqa: E402
from radiance.kernels.formats import gguf_pq2 as G  # noqa: E402
from radiance.kernels.formats import pq2 as T  # noqa: E402

HIDDEN, FFN, HEADS, KV_HEADS = 256, 384, 4, 2  # head dim 64


def pq2_blocks(codes: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Independent PQ2_0 encoder: [N, K] codes 0..2 and [N, K/128] f16 -> [N, K/128*34] bytes."""
    n, k = codes.shape
    out = np.zeros((n, k // 128, 34), dtype=np.uint8)
    out[:, :, :2] = d.astype(np.float16).view(np.uint8).reshape(n, k // 128, 2)
    for j in range(128):
        out[:, :, 2 + j // 4] |= (codes.reshape(n, k // 128, 128)[:, :, j] << (2 * (j % 4))).astype(np.uint8)
    return out.reshape(n, -1)


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert-time q/k row interleave (what the importer must undo)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_model(path, arch="qwen2", extra=None, with_pq2=True, rng=None):
    rng = rng or np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_context_length(4096)
    truth = {}
    w.add_tensor("token_embd.weight", rng.standard_normal((32, HIDDEN)).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.bias", rng.standard_normal(HIDDEN).astype(np.float32))
    shapes = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * 64, HIDDEN), "ffn_down": (HIDDEN, FFN)}
    for kind, (n, k) in shapes.items() if with_pq2 else ():
        codes = rng.integers(0, 3, (n, k)).astype(np.uint8)
        d = (rng.random((n, k // 128)) + 0.1).astype(np.float16)
        truth[kind] = (codes, d)
        blocks = pq2_blocks(codes, d)
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            blocks = llama_permute(blocks, HEADS if kind == "attn_q" else KV_HEADS)
        # gguf-py has no type 142: hand it raw bytes (as int8 so it keeps our element shape)
        w.add_tensor(f"blk.0.{kind}.weight", blocks.view(np.int8), raw_shape=(n, k), raw_dtype=G.GGML_PQ2_0)
    for name, arr in (extra or {}).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return truth


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_import_matches_codes_and_scales(tmp_path, arch):
    truth = write_model(tmp_path / "m.gguf", arch)
    out = tmp_path / "out"
    out.mkdir()
    G.import_gguf_pq2(tmp_path / "m.gguf", out)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == {"quant_method": "pq2", "bits": 2, "group_size": 128}
    assert (cfg["hidden_size"], cfg["num_key_value_heads"], cfg["vocab_size"], cfg["tie_word_embeddings"]) == (
        HIDDEN, KV_HEADS, 32, True)
    assert cfg["model_type"] == arch
    with safe_open(out / "model.safetensors", "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    names = {"attn_q": "model.layers.0.self_attn.q_proj", "attn_k": "model.layers.0.self_attn.k_proj",
             "ffn_down": "model.layers.0.mlp.down_proj"}
    for kind, (codes, d) in truth.items():
        t = T.Pq2Tensors.from_state(state, names[kind])
        T.validate(t, names[kind])
        assert np.array_equal(T.unpack_ternary(t.qweight).numpy(), codes), kind
        assert np.array_equal(t.scales.numpy(), d), kind
        w = R.dequant_pq2(t.qweight, t.scales)
        assert torch.equal(w, (torch.from_numpy(codes).float() - 1) * torch.from_numpy(d).float().repeat_interleave(128, 1))
    assert state["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert state["model.embed_tokens.weight"].shape == (32, HIDDEN)
    assert state["model.layers.0.self_attn.q_proj.bias"].shape == (HIDDEN,)


def test_rejects_unknown_types_and_non_pq2_files(tmp_path):
    # an int8 tensor is written as ggml type I8 (24), which no checkpoint of ours holds
    write_model(tmp_path / "q8.gguf", extra={"blk.0.ffn_up.weight": np.zeros((FFN, HIDDEN), np.int8)})
    with pytest.raises(FormatError, match=r"tensor blk.0.ffn_up.weight has ggml type 24"):
        G.import_gguf_pq2(tmp_path / "q8.gguf", tmp_path)
    write_model(tmp_path / "plain.gguf", with_pq2=False)
    with pytest.raises(FormatError, match="no PQ2_0 \\(type 142\\) tensor"):
        G.import_gguf_pq2(tmp_path / "plain.gguf", tmp_path)
    write_model(tmp_path / "odd.gguf", extra={"blk.0.weird.weight": np.zeros(4, np.float32)})
    with pytest.raises(FormatError, match="blk.0.weird.weight: no Hugging Face name"):
        G.import_gguf_pq2(tmp_path / "odd.gguf", tmp_path)


def test_rejects_bad_magic_truncation_and_code_3(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGML" + bytes(20))
    with pytest.raises(FormatError, match="not a GGUF file"):
        G.read_gguf(tmp_path / "x.gguf")
    write_model(tmp_path / "m.gguf")
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-1000])
    with pytest.raises(FormatError, match="is truncated"):
        G.import_gguf_pq2(tmp_path / "cut.gguf", tmp_path)
    raw = np.full(34, 0xFF, np.uint8)  # every code 3
    raw[:2] = np.array([1.0], np.float16).view(np.uint8)  # a finite scale
    with pytest.raises(FormatError, match="invalid ternary code 3"):
        T.validate(G.pq2_from_bytes(raw, 1, 128, "t"), "t")


def test_reader_sees_metadata_and_tensor_infos(tmp_path):
    write_model(tmp_path / "m.gguf")
    g = G.read_gguf(tmp_path / "m.gguf")
    assert g.metadata["general.architecture"] == "qwen2"
    info = {t.name: t for t in g.tensors}
    assert info["blk.0.ffn_down.weight"].ne == (FFN, HIDDEN)
    assert info["blk.0.ffn_down.weight"].ggml_type == 142
    assert g.data_start % 32 == 0


def test_cli_import_gguf(tmp_path):
    from typer.testing import CliRunner

    from radiance.cli import app

    write_model(tmp_path / "m.gguf")
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    r = CliRunner().invoke(app, ["import-gguf", str(tmp_path / "m.gguf"), str(tmp_path / "o"), "--tokenizer", str(tok)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "tokenizer.json").is_file() and (tmp_path / "o" / "model.safetensors").is_file()
    r = CliRunner().invoke(app, ["import-gguf", str(tmp_path / "missing.gguf"), str(tmp_path / "o2")])
    assert r.exit_code == 2 and "no such file" in r.output and not (tmp_path / "o2").exists()
