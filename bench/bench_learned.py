"""Learned rotations on the H200, in one call: z-lab's optimizer against radiance's on one real
Qwen layer, then the whole 0.5B through `radiance quantize --rotation learned --device cuda`.

    python bench/bench_learned.py export            # here (CPU): .carry/learned/ from the fetched Qwen
    python bench/bench_learned.py device --out $OUT # on the H200 (.carry and .whl carried)
    python bench/bench_learned.py cpu-check         # here: the device path on CPU, z-lab's CUDA
                                                    # rotation replaced by radiance's reference one

Layer comparison: the same layer (index LAYER of Qwen2.5-Coder-0.5B), the same calibration
windows (its inputs in the bf16 model, from the shipped corpus) and the same targets (its bf16
output on them) for both; both stages, the same epochs and batches; z-lab at its published
rates (0.05 / 0.05, then 1e-5 / 1e-6) with loss "mse", radiance at its defaults. Both results are
exported to paroquant tensors (z-lab's by its own `paroquant.cli.convert._quantize_layer`) and
scored the same way: MSE of the layer output, radiance's reference numerics, held-out windows.

Whole model: the real checkpoint when RADIANCE_HOME (or --model) has it, else a random-weight
model of the same shapes (the timing depends on shapes only) with the tokenizer the bench trains;
run in a child process stopped --budget-s (420) after the bench started, per-layer times printed
as they finish; on the real checkpoint `eval kl` (none, int8_group, fp8_group) follows while time is left.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".carry" / "learned"
LAYER = 12
TRAIN, VAL, SEQ = 16, 2, 512  # windows carried: 16.5 MB of bf16 inputs beside the 30 MB layer
EPOCHS, BATCH = 10, 4


# ----------------------------------------------------------------------------- export (CPU, here)
def export() -> None:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from radiance.quantize import learned as L
    from radiance.quantize.calibration import calibration_set
    from radiance.quantize.fetch import fetch_model

    src = fetch_model("qwen2.5-coder-0.5b")
    tok = AutoTokenizer.from_pretrained(src)
    calib = calibration_set(tok, None, TRAIN, SEQ, 0)  # its val: TRAIN // 8 = VAL windows
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    layers = model.model.layers
    batches = L._capture(model, layers, calib.train[:TRAIN].split(BATCH) + calib.val[:VAL].split(BATCH), "cpu")
    for layer in layers[:LAYER]:
        batches = [(y, kw) for y, (_, kw) in zip(L._run(layer, batches), batches)]
    hidden = torch.cat([h for h, _ in batches])
    state = {f"layer.{k}": v.to(torch.bfloat16) for k, v in layers[LAYER].state_dict().items()}
    state["inputs"] = hidden.to(torch.bfloat16)
    CARRY.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(CARRY / f"qwen05b_layer{LAYER}.safetensors"))
    (CARRY / "config.json").write_text(json.dumps(model.config.to_dict(), indent=1))
    print(f"wrote {CARRY}: layer {LAYER}, inputs {tuple(hidden.shape)}")


# ----------------------------------------------------------------------------- the layer, its data
def load_layer(dev: str):
    """(bf16 layer as float32 on dev, train batches, val batches): [(x, kwargs, target)]."""
    from safetensors.torch import load_file
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Model

    from radiance.quantize import learned as L

    cfg = Qwen2Config.from_dict(json.loads((CARRY / "config.json").read_text()))
    cfg.num_hidden_layers = 1
    shell = Qwen2Model(cfg).float().to(dev).eval().requires_grad_(False)
    state = load_file(str(CARRY / f"qwen05b_layer{LAYER}.safetensors"))
    shell.layers[0].load_state_dict({k[6:]: v.float() for k, v in state.items() if k.startswith("layer.")})
    x = state["inputs"].float().to(dev)
    layer = shell.layers[0]
    kw = layer_kwargs(shell, x[:BATCH])
    batches = [(b, kw, L._forward(layer, b, kw).detach()) for b in x.split(BATCH)]
    return layer, batches[: TRAIN // BATCH], batches[TRAIN // BATCH:]


def layer_kwargs(shell, x: torch.Tensor) -> dict:
    """The keyword arguments (rotary embeddings, mask) the model passes its layers for a batch shaped like x."""
    from radiance.quantize.learned import _Captured

    got = []

    def hook(_mod, _args, kwargs):
        got.append({k: v for k, v in kwargs.items() if k not in ("past_key_values", "use_cache")})
        raise _Captured

    handle = shell.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        shell(inputs_embeds=x, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    return got[0]


def layer_loss(layer, tensors: dict, val, dev) -> float:
    from radiance.quantize import learned as L

    L._install_reference(layer, tensors, dev)
    return L._mse(L._run(layer, [(x, kw) for x, kw, _ in val]), [y for _, _, y in val])


class NoBar:
    def reset(self, *a, **k): pass
    def update(self, *a, **k): pass
    def advance(self, *a, **k): pass


NAMES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def radiance_layer(dev: str) -> dict:
    from radiance.quantize import learned as L
    from radiance.quantize.convert import QuantizeOptions
    from radiance.quantize.learned_options import LearnedOptions

    layer, train, val = load_layer(dev)
    opts = QuantizeOptions("paroquant", "learned", 8, 0, (), dev, LearnedOptions(samples=TRAIN, seq_len=SEQ, epochs=EPOCHS, batch=BATCH))
    opts.check()
    sync(dev)
    t0 = time.monotonic()
    tensors, before = L._optimize_layer(layer, LAYER, NAMES, (train, val), opts, NoBar(), None)
    sync(dev)
    seconds = time.monotonic() - t0
    return {"optimizer": "radiance", "loss": layer_loss(layer, tensors, val, dev), "seconds": seconds}


def zlab_layer(dev: str) -> dict:
    """z-lab's PseudoQuantizedLinear + optimize_module on the same data, exported by z-lab's own code."""
    if "datasets" not in sys.modules:  # imported by paroquant.optim.util for its data loader only
        sys.modules["datasets"] = types.SimpleNamespace(load_dataset=None)
    from paroquant.cli.convert import _quantize_layer
    from paroquant.optim.qlinear import PseudoQuantizedLinear, reset_angles_by_mask
    from paroquant.optim.rotation import transform_to_kernel_data
    from paroquant.optim.train import get_random_rotation_pairs, optimize_module

    from radiance.kernels import reference as R
    from radiance.kernels.formats.paroquant import ParoTensors, validate
    from radiance.quantize import learned as L

    layer, train, val = load_layer(dev)
    sync(dev)
    t0 = time.monotonic()
    modules = {}
    for name in NAMES:
        lin = layer.get_submodule(name)
        w = lin.weight.float()
        pairs = get_random_rotation_pairs(w.view(w.shape[0], -1, 128).permute(1, 0, 2), group_size=128,
                                          num_rotations=8, num_pairs_factor=0.5, seed=LAYER)
        pairs = [torch.tensor(p, dtype=torch.int32) for p in pairs]
        rot = [t.to(dev) for t in transform_to_kernel_data(pairs, [torch.zeros(len(p)) for p in pairs], group_size=128)]
        cs = torch.ones(1, w.shape[1], dtype=torch.float16, device=dev)
        modules[name] = PseudoQuantizedLinear(lin.half(), rot, cs, group_size=128, n_bits=4,
                                              num_rotations=torch.tensor(8, device=dev))
        L._set(layer, name, modules[name])
    layer.float()
    args = ([(x,) for x, _, _ in train], [y for _, _, y in train])
    vargs = ([(x,) for x, _, _ in val], [y for _, _, y in val])
    kw = train[0][1]
    for stage in ({"channel_scales": 0.05, "angles": 0.05}, {"weight": 1e-5, "quantizer": 1e-6}):
        groups = []
        for m in modules.values():
            m.set_optim_enabled(**{k: True for k in stage})
            groups += [{"params": m.get_optim_params(k), "lr": lr, "weight_decay": 0.01, "betas": (0.9, 0.95),
                        "eps": 1e-10} for k, lr in stage.items()]
        optimize_module(layer, args, vargs, kw, kw, groups, loss_fn="mse", n_iter=EPOCHS, early_stop=None,
                        post_optim_callback=reset_angles_by_mask)
    sync(dev)
    seconds = time.monotonic() - t0
    tensors, worst = {}, 0.0
    for name, m in modules.items():
        buffers, _, _, _ = _quantize_layer(m.state_dict(), dev)
        prefix = f"model.layers.{LAYER}.{name}"
        t = ParoTensors(**{k: buffers[k].to(dev) for k in ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales")})
        validate(t, prefix)
        # the convention check: their exported tensors, read as paroquant by radiance's reference,
        # compute what their own pseudo-quantized weight does (float16 theta / scales: ~1e-3)
        x = torch.randn(16, m.in_feat, device=dev)
        ours = R.paroquant_linear(x, t)
        theirs = x @ m.pseudo_weight().float().t()
        worst = max(worst, float((ours - theirs).abs().max() / theirs.abs().max()))
        tensors[prefix] = t
    assert worst < 2e-2, f"z-lab's export read as paroquant differs from its pseudo weight by {worst:.3g}: convention"
    fresh, _, _ = load_layer(dev)
    return {"optimizer": "z-lab paroquant 0.1.16", "loss": layer_loss(fresh, tensors, val, dev), "seconds": seconds,
            "export_vs_pseudo_weight_rel": worst}


def radiance_rtn_loss(dev: str) -> float:
    from radiance.quantize.convert import QuantizeOptions, quantize_linear
    from radiance.kernels.formats.paroquant import ParoTensors

    layer, _, val = load_layer(dev)
    opts = QuantizeOptions("paroquant", "identity", 1)
    tensors = {}
    for name in NAMES:
        prefix = f"model.layers.{LAYER}.{name}"
        tensors[prefix] = ParoTensors.from_state(quantize_linear(prefix, layer.get_submodule(name).weight.detach().cpu(), opts), prefix)
    return layer_loss(layer, tensors, val, dev)


def sync(dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------- whole model
def whole_model(dev: str, model: Path | None, deadline: float, work: Path) -> dict:
    from radiance.quantize.fetch import bf16_dir, is_complete

    src = model or bf16_dir("qwen2.5-coder-0.5b")
    real = is_complete(src)
    if not real:
        src = work / "random-qwen05b"
        if not (src / "config.json").is_file():  # a resumed call reuses the first call's model
            random_qwen(src)
    dest = work / "learned-qwen05b"
    # what `radiance quantize SRC DEST --format paroquant --rotation learned --device cuda --resume`
    # runs (the CLI module also mounts deploy/ and healthchecks/, which the device's checkout may lack);
    # --resume: a second call on the same machine continues after the layers the first one finished
    code = ("import sys; from radiance.quantize.convert import QuantizeOptions, quantize_checkpoint; "
            "from radiance.quantize.learned_options import LearnedOptions; "
            "print(quantize_checkpoint(sys.argv[1], sys.argv[2], QuantizeOptions('paroquant', 'learned', device=sys.argv[3], "
            "learned=LearnedOptions(resume=True))))")
    cmd = [sys.executable, "-P", "-c", code, str(src), str(dest), dev]  # -P: not the checkout's own radiance/
    t0 = time.monotonic()
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        try:
            for line in p.stdout:
                print(line, end="", flush=True)
                lines.append(line)
                if time.monotonic() > deadline:
                    p.kill()
                    break
        finally:
            p.wait()
    seconds = time.monotonic() - t0
    done = [ln for ln in lines if ln.lstrip().startswith("layer ")]
    result = {"real_weights": real, "source": str(src), "finished": p.returncode == 0, "seconds": round(seconds, 1),
              "layers_done": len(done), "layer_lines": [ln.strip() for ln in done]}
    record = dest / "radiance-quantize.json"
    if p.returncode == 0 and record.is_file():  # per-layer seconds of every call, resumed layers included
        layers = json.loads(record.read_text()).get("learned_layers", [])
        result["layer_seconds_total"] = round(sum(r["seconds"] for r in layers), 1)
        print(f"whole model: {len(layers)} layers, {result['layer_seconds_total']} s of layer optimization "
              f"(this call {result['seconds']} s)", flush=True)
    if real and p.returncode == 0:  # the quality rows: radiance eval kl on this checkpoint (CPU, float32)
        from radiance.quantize.evaluate import kl_report

        for act in ("none", "int8_group", "fp8_group"):
            if time.monotonic() > deadline + 90:  # each takes about a minute on the device's cores
                break
            r = kl_report(dest, act=act, progress=False)
            result[f"kl_{act}"] = {"kl": r.kl_mean, "kl_max": r.kl_max, "top1": r.top1, "ppl": r.ppl_quantized}
            print(f"eval kl --act {act}: KL={r.kl_mean:.4f} top-1={100 * r.top1:.2f}% ppl {r.ppl_quantized:.3f}", flush=True)
    return result


def random_qwen(path: Path) -> Path:
    """Qwen2.5-0.5B's shapes, random weights (outlier channels as in radiance.testing.tiny_model)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from radiance.testing.tiny_model import write_tiny_qwen

    write_tiny_qwen(path)  # its tokenizer (ids < 512 are valid ids of the real vocabulary)
    cfg = Qwen2Config.from_dict(json.loads((CARRY / "config.json").read_text()))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for mod in model.model.layers.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight[:, torch.randperm(mod.in_features)[:8]] *= 8
    for f in path.glob("*.safetensors"):
        f.unlink()
    model.to(torch.bfloat16).save_pretrained(path)
    return path


# ----------------------------------------------------------------------------- entry
def cpu_rotation_shim() -> None:
    """paroquant.kernels.cuda builds a CUDA extension at import; for the CPU check its rotation is
    radiance's reference (the same convention), differentiable through torch."""
    from radiance.kernels import reference as R

    def scaled_pairwise_rotation(x, idx_ij, theta, scales=None, group_size=128):
        return R.rotate(x, idx_ij, theta, scales, group_size).to(x.dtype)

    sys.modules["paroquant.kernels.cuda"] = types.SimpleNamespace(scaled_pairwise_rotation=scaled_pairwise_rotation)


NEEDED = {  # module -> what to carry in .whl/ when the device's Python lacks it (pip download --no-deps)
    "paroquant": "paroquant==0.1.16 (paroquant-0.1.16-py3-none-any.whl)",
    "ninja": "ninja==1.13.2 (ninja-1.13.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl; torch's cpp_extension builds z-lab's rotation with it)",
    "transformers": "transformers==5.19.0 (py3-none-any) with tokenizers, huggingface-hub, safetensors, regex",
    "tokenizers": "tokenizers (cp39-abi3 manylinux x86_64)",
    "safetensors": "safetensors (cp38-abi3 manylinux x86_64)",
    "rich": "rich, markdown-it-py, mdurl, pygments (py3-none-any)",
    "filelock": "filelock (py3-none-any)",
}


def preflight() -> None:
    import importlib.util
    import shutil

    missing = [f"{m}: {w}" for m, w in NEEDED.items() if importlib.util.find_spec(m) is None]
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file():
        missing.append("nvcc: z-lab's CUDA rotation extension is built with it at import")
    if not (CARRY / f"qwen05b_layer{LAYER}.safetensors").is_file():
        missing.append(f"{CARRY}: carry .carry (made by `python bench/bench_learned.py export`)")
    if missing:
        sys.exit("bench_learned: missing on this machine:\n  " + "\n  ".join(missing))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["export", "device", "cpu-check"])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    ap.add_argument("--model", type=Path, default=None, help="bf16 Qwen for the whole-model run")
    ap.add_argument("--budget-s", type=int, default=420, help="the quantize run stops this many seconds after the bench started")
    ap.add_argument("--no-layer", action="store_true", help="skip the per-layer z-lab comparison (whole model only)")
    ap.add_argument("--work", type=Path, default=None,
                    help="the whole-model run's models (default --out); one kept between calls lets a second call resume")
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget_s
    if args.mode == "export":
        return export()
    global EPOCHS
    dev = "cuda" if args.mode == "device" else "cpu"
    if dev == "cuda":
        preflight()
    else:
        EPOCHS = 1
        cpu_rotation_shim()
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
               "layer": LAYER, "train_windows": TRAIN, "val_windows": VAL, "seq_len": SEQ, "epochs": EPOCHS}
    if not args.no_layer:
        results["rtn_identity_loss"] = radiance_rtn_loss(dev)
        for fn in (zlab_layer, radiance_layer):
            r = fn(dev)
            results[r["optimizer"]] = r
            print(json.dumps(r), flush=True)
        ratio = results["radiance"]["loss"] / results["z-lab paroquant 0.1.16"]["loss"]
        results["loss_ratio_radiance_over_zlab"] = ratio
        print(f"layer {LAYER}: radiance / z-lab layer MSE = {ratio:.3f} (the bar: <= 1.1)", flush=True)
    if dev == "cuda":
        work = args.work or args.out
        work.mkdir(parents=True, exist_ok=True)
        results["whole_model"] = whole_model(dev, args.model, deadline, work)
    (args.out / "bench_learned.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
