"""`radiance eval kl`: KL divergence and top-1 agreement of a quantized checkpoint vs its bf16 source.

Runs on CPU with transformers, in float32. The source model is loaded once; each quantized linear
is a `ReferenceLinear` (the dequantized weight and, for paroquant, the reference rotation applied
to the activations: kernels/reference.py), swapped in and out per chunk so only one model lives in
memory. The text is the corpus shipped in quantize/corpus/, cut into fixed token chunks.

Per position: KL(P_source || P_quant) over the full vocabulary (nats) and whether the argmaxes
agree; reported as means over all positions, with both models' perplexity on the same text.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from safetensors import safe_open

from radiance.kernels import methods
from radiance.kernels import reference as R
from radiance.progress import bar as progress_bar
from radiance.quantize.convert import RECORD, single_thread

ACTS = ("none", "int8_group", "fp8_group", "fp8_token")


class EvalError(ValueError):
    pass


@dataclass
class KlReport:
    quantized: str
    source: str
    quant_method: str
    act: str
    positions: int
    kl_mean: float
    kl_max: float
    top1: float
    ppl_source: float
    ppl_quantized: float


class ReferenceLinear(torch.nn.Module):
    """y = fake_quant(rotate(x)) @ W_dq^T + b in float32 (rotation only for paroquant).

    The weight is dequantized per call from the packed tensors (`weight_fn`), so the evaluation
    holds one float32 model plus packed weights, not a second float32 copy of every linear."""

    def __init__(self, weight_fn, bias: torch.Tensor | None, plan=None, channel_scales=None, act=None):
        super().__init__()
        self.weight_fn = weight_fn
        self.bias = bias
        self.plan, self.cs, self.act = plan, channel_scales, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = R.apply_rotation(x, self.plan, self.cs) if self.plan is not None else x.to(torch.float32)
        y = R.fake_quant(y, self.act)
        y = y @ self.weight_fn().t()
        return y if self.bias is None else y + self.bias


def corpus_texts() -> dict[str, str]:
    root = resources.files("radiance.quantize") / "corpus"
    return {p.name: p.read_text() for p in sorted(root.iterdir(), key=lambda p: p.name) if p.name.endswith(".txt")}


def corpus_chunks(tokenizer, seq_len: int, max_chunks: int) -> list[torch.Tensor]:
    chunks = []
    for text in corpus_texts().values():
        ids = tokenizer(text, return_tensors="pt").input_ids[0]
        chunks += [ids[i : i + seq_len] for i in range(0, len(ids) - seq_len + 1, seq_len)]
    return chunks[:max_chunks]


def source_of(quant_dir: Path) -> Path:
    rec = quant_dir / RECORD
    if not rec.is_file():
        raise EvalError(f"{quant_dir}: no {RECORD} (not written by `radiance quantize`); pass --base SOURCE_DIR")
    return Path(json.loads(rec.read_text())["source"])


def reference_linears(quant_dir: Path, act: str | None) -> tuple[str, dict[str, ReferenceLinear]]:
    cfg = json.loads((quant_dir / "config.json").read_text()).get("quantization_config")
    if not cfg:
        raise EvalError(f"{quant_dir}/config.json: no quantization_config; give a radiance-quantized checkpoint")
    method = cfg.get("quant_method")
    if method not in methods.CHECKPOINT_METHODS:
        raise EvalError(f"{quant_dir}/config.json: quant_method {method!r}; eval kl reads "
                        f"{', '.join(methods.CHECKPOINT_METHODS)}")
    spec = methods.get(method)
    tensor_set, validate, dequant = (methods.resolve(r) for r in (spec.tensor_set, spec.validate, spec.dequant))
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(quant_dir.glob("*.safetensors")):
        with safe_open(shard, "pt") as f:
            keys = set(f.keys())  # mxfp4's codes are `weight` beside a `weight_scale`; other weights stay out
            state.update({k: f.get_tensor(k) for k in keys if not k.endswith(".weight")
                          or (spec.codes == "weight" and k.removesuffix(".weight") + f".{spec.marked_by}" in keys)})
    key = f".{spec.marked_by}"
    prefixes = sorted(k.removesuffix(key) for k in state if k.endswith(key))
    mods = {}
    for p in prefixes:
        bias = state.get(f"{p}.bias")
        bias = None if bias is None else bias.to(torch.float32)
        t = tensor_set.from_state(state, p)
        validate(t, p, cfg.get("bits", spec.bits), cfg.get("group_size", spec.group_size))
        w = functools.partial(dequant, *(getattr(t, name) for name in spec.weights))
        if spec.rotated:
            mods[p] = ReferenceLinear(w, bias, R.rotation_plan(t.pairs, t.theta), t.channel_scales.to(torch.float32), act)
        else:
            mods[p] = ReferenceLinear(w, bias, act=act)
    if not mods:
        raise EvalError(f"{quant_dir}: no quantized linear (no *{key} tensors)")
    return method, mods


def _swap(model, mods: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
    old = {}
    for name, mod in mods.items():
        parent, _, leaf = name.rpartition(".")
        owner = model.get_submodule(parent)
        old[name] = getattr(owner, leaf)
        setattr(owner, leaf, mod)
    return old


def kl_report(
    quant_dir: Path, base_dir: Path | None = None, act: str = "none",
    seq_len: int = 256, max_chunks: int = 8, progress: bool = True,
) -> KlReport:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if act not in ACTS:
        raise EvalError(f"--act {act!r}: use one of {', '.join(ACTS)}")
    quant_dir = Path(quant_dir)
    base_dir = Path(base_dir) if base_dir else source_of(quant_dir)
    method, quant_mods = reference_linears(quant_dir, None if act == "none" else act)
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    missing = [p for p in quant_mods if not isinstance(model.get_submodule(p), torch.nn.Linear)]
    if missing:
        raise EvalError(f"{quant_dir}: {missing[0]} is no nn.Linear of the model in {base_dir}; wrong --base?")
    chunks = corpus_chunks(tok, seq_len, max_chunks)
    if not chunks:
        raise EvalError(f"the corpus holds fewer than --seq-len {seq_len} tokens per file")
    stats = compare(model, quant_mods, chunks, f"KL {quant_dir.name} vs {base_dir.name}", progress)
    return KlReport(quantized=str(quant_dir), source=str(base_dir), quant_method=method, act=act, **stats)


def compare(model, quant_mods: dict[str, torch.nn.Module], chunks: list[torch.Tensor], label: str = "KL",
            progress: bool = False) -> dict:
    """Per chunk: logits with the model's own linears, then with `quant_mods` swapped in."""
    kl_sum = kl_max = nll_s = nll_q = 0.0
    agree = n = 0
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with torch.inference_mode(), single_thread(), progress_bar(*cols, enabled=progress) as bar:
        task = bar.add_task(label, total=len(chunks))
        for ids in chunks:
            batch = ids.unsqueeze(0)
            lp_s = torch.log_softmax(model(batch).logits[0].float(), -1)
            originals = _swap(model, quant_mods)
            try:
                lp_q = torch.log_softmax(model(batch).logits[0].float(), -1)
            finally:
                _swap(model, originals)
            kl = (lp_s.exp() * (lp_s - lp_q)).sum(-1)
            kl_sum += float(kl.sum())
            kl_max = max(kl_max, float(kl.max()))
            agree += int((lp_s.argmax(-1) == lp_q.argmax(-1)).sum())
            nxt = ids[1:]
            nll_s -= float(lp_s[:-1].gather(-1, nxt[:, None]).sum())
            nll_q -= float(lp_q[:-1].gather(-1, nxt[:, None]).sum())
            n += len(ids)
            bar.advance(task)
    nt = n - len(chunks)
    return {"positions": n, "kl_mean": kl_sum / n, "kl_max": kl_max, "top1": agree / n,
            "ppl_source": math.exp(nll_s / nt), "ppl_quantized": math.exp(nll_q / nt)}


def report_json(r: KlReport) -> str:
    return json.dumps(asdict(r), indent=2)
