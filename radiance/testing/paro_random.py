"""Random paroquant layers and the numerics checks the gpu tests, the interpreter tests and the
benchmark share (random permutation pairs per group, random angles, asymmetric zeros 2..14)."""

from __future__ import annotations

import math

import torch

from radiance.kernels import reference
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, pack_awq
from radiance.kernels.linear import Rotation, Run


def random_layer(n: int, k: int, gen: torch.Generator, krot: int = 8) -> ParoTensors:
    """On gen's device (a CUDA generator makes the big bench layers fast)."""
    g = k // GROUP_SIZE
    dev = gen.device
    codes = torch.randint(0, 16, (k, n), generator=gen, device=dev)
    zeros = torch.randint(2, 15, (g, n), generator=gen, device=dev)
    scales = (torch.rand(g, n, generator=gen, device=dev) * 0.02 + 0.002).to(torch.float16)
    pairs = torch.argsort(torch.rand(krot * g, GROUP_SIZE, generator=gen, device=dev), dim=-1)
    pairs = pairs.view(krot, k).to(torch.int16)
    theta = ((torch.rand(krot, k // 2, generator=gen, device=dev) * 2 - 1) * math.pi).to(torch.float16)
    cs = (torch.rand(1, k, generator=gen, device=dev) + 0.5).to(torch.float16)
    return ParoTensors(pack_awq(codes), pack_awq(zeros), scales, pairs, theta, cs)


def rotation_of(t: ParoTensors) -> Rotation:
    return Rotation.of(t)


def runs_of(sizes: list[int]) -> list[Run]:
    """One run per partition of these sizes (distinct rotations, as random layers have), in column order."""
    runs, n0 = [], 0
    for i, size in enumerate(sizes):
        runs.append(Run(n0, n0 + size, i))
        n0 += size
    return runs


def merged(parts: list[ParoTensors]) -> tuple[list, list, list, list[Rotation], list[Run]]:
    """P layers sharing K -> (qweights, qzeros, scales, rotations, runs) for paro_ops.prepare."""
    return ([t.qweight for t in parts], [t.qzeros for t in parts], [t.scales for t in parts],
            [Rotation.of(t) for t in parts], runs_of([t.out_features for t in parts]))


def reference_merged(x: torch.Tensor, parts: list[ParoTensors], act: str | None) -> torch.Tensor:
    """fp32 reference of a merged linear: each partition's reference.paroquant_linear, side by side."""
    return torch.cat([reference.paroquant_linear(x.float(), t, act=act) for t in parts], dim=1)


def rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.double(), ref.double()
    if not torch.isfinite(y).all():
        return math.inf
    return float((y - ref).norm() / ref.norm())


REAL_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def export_real_layer(model_dir: str, out: str, layer: int = 0, rows: int = 300) -> None:
    """One decoder layer of a bf16 HF checkpoint, quantized by radiance's own quantizer, plus real
    activations feeding each linear (norm-fed rows of token embeddings; the MLP's silu*up for
    down_proj), into one safetensors file small enough to carry to the device."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from radiance.quantize.convert import QuantizeOptions, quantize_linear

    f = safe_open(f"{model_dir}/model.safetensors", "pt")
    pre = f"model.layers.{layer}."
    state: dict[str, torch.Tensor] = {}
    opts = QuantizeOptions(format="paroquant")
    w = {name: f.get_tensor(pre + name + ".weight") for name in REAL_LINEARS}
    for name in REAL_LINEARS:
        state.update(quantize_linear(name, w[name].to(torch.float32), opts))
    emb = f.get_tensor("model.embed_tokens.weight")[1000:1000 + rows].to(torch.float32)

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.to(torch.float32)

    x_attn = norm(emb, f.get_tensor(pre + "input_layernorm.weight"))
    x_mlp = norm(emb, f.get_tensor(pre + "post_attention_layernorm.weight"))
    h = torch.nn.functional.silu(x_mlp @ w["mlp.gate_proj"].float().t()) * (x_mlp @ w["mlp.up_proj"].float().t())
    state["x.attn"] = x_attn.to(torch.bfloat16)
    state["x.mlp"] = x_mlp.to(torch.bfloat16)
    state["x.down"] = h.to(torch.bfloat16)
    save_file({k: v.contiguous() for k, v in state.items()}, out)
