"""`radiance quantize --rotation learned`: ParoQuant's layer-wise optimizer, on CPU or CUDA.

Per decoder layer i, in order:
1. targets: the source layer's output on the source model's own hidden states (fp_in -> fp_out);
2. inputs: the hidden states after the already-quantized layers 0..i-1 (q_in), so each layer
   also learns to absorb the error of the layers before it;
3. every quantized linear of the layer becomes a `LearnedLinear` (pairs fixed per linear from the
   seed and its name); stage 1 learns angles and channel scales, stage 2 the rotated weights and
   the quantizer's scales / zeros, each `epochs` passes over the calibration windows with AdamW and
   a cosine decay, minimizing MSE(layer(q_in), fp_out); after every epoch the validation windows
   pick the best state (the initial one, plain RTN, included);
4. the layer's paroquant tensors are saved in the work directory, and q_out is computed from the
   saved tensors with the reference numerics -- the same path on a resumed run, which therefore
   equals an uninterrupted one.

The work directory `.<OUT>.learned` beside OUT holds settings.json and layer-NNN.safetensors; it is
removed once OUT is written. `resume` continues after its last finished layer when its settings
(options, source) equal this run's. Threads: torch's default (OMP_NUM_THREADS); the result is
deterministic for a seed, device and thread count.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from safetensors.torch import load_file
from safetensors.torch import save as save_bytes

from radiance import atomic
from radiance.kernels import reference as R
from radiance.kernels.formats.paroquant import ParoTensors, validate
from radiance.progress import bar as progress_bar
from radiance.quantize.calibration import calibration_set
from radiance.quantize.convert import (DEFAULT_SKIP, QuantizeError, QuantizeOptions, check_linear_shape,
                                       is_quantized_linear, write_checkpoint)
from radiance.quantize.evaluate import ReferenceLinear
from radiance.quantize.learned_linear import LearnedLinear, disjoint_pairs, pair_generator


@dataclass
class LayerReport:
    index: int
    loss_before: float  # validation MSE of the layer output with plain RTN (identity, scales 1)
    loss_after: float  # the same with the saved learned tensors (reference numerics)
    seconds: float
    resumed: bool


class _Captured(Exception):
    pass


def work_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.learned"


def quantize_learned(src: Path, out: Path, opts: QuantizeOptions, progress: bool = True) -> Path:
    """Optimize every decoder layer, then write OUT atomically in the paroquant format."""
    opts.check()
    src, out = Path(src), Path(out)
    states, reports = learned_states(src, out, opts, progress)
    layers = [{"layer": r.index, "loss_before": r.loss_before, "loss_after": r.loss_after,
               "seconds": round(r.seconds, 1)} for r in reports]
    write_checkpoint(src, out, opts, progress, linear_fn=lambda prefix, w, _opts: states[prefix],
                     record_extra={"learned_layers": layers})
    shutil.rmtree(work_dir(out), ignore_errors=True)
    return out


def learned_states(src: Path, out: Path, opts: QuantizeOptions, progress: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lo = opts.learned
    dev = torch.device(opts.device)
    tok = AutoTokenizer.from_pretrained(src)
    calib = calibration_set(tok, Path(lo.calib) if lo.calib else None, lo.samples, lo.seq_len, opts.seed)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(dev).eval()
    model.requires_grad_(False)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise QuantizeError(f"{src}: no model.layers; --rotation learned handles Llama/Qwen-family decoders")
    names = _linears_per_layer(model, len(layers), opts)
    work = _open_work_dir(work_dir(out), src, opts)

    fp_train = _capture(model, layers, calib.train.split(lo.batch), dev)
    fp_val = _capture(model, layers, calib.val.split(lo.batch), dev)
    q_train, q_val = [h for h, _ in fp_train], [h for h, _ in fp_val]
    states: dict[str, dict[str, torch.Tensor]] = {}
    reports: list[LayerReport] = []
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with progress_bar(*cols, enabled=progress) as bar:
        layer_task = bar.add_task("learned rotations: layers", total=len(layers))
        step_task = bar.add_task("", total=None)
        for i, layer in enumerate(layers):
            t0 = time.monotonic()
            targets = _run(layer, fp_train)
            val_targets = _run(layer, fp_val)
            saved = work / f"layer-{i:03d}.safetensors"
            if lo.resume and saved.is_file():
                tensors, meta = _load_layer(saved, names[i])
                report = LayerReport(i, float(meta["loss_before"]), float(meta["loss_after"]), float(meta["seconds"]), True)
            else:
                data = ([(q, kw, y) for q, (_, kw), y in zip(q_train, fp_train, targets)],
                        [(q, kw, y) for q, (_, kw), y in zip(q_val, fp_val, val_targets)])
                tensors, before = _optimize_layer(layer, i, names[i], data, opts, bar, step_task)
                report = None
            _install_reference(layer, tensors, dev)
            q_train = _run(layer, list(zip(q_train, (kw for _, kw in fp_train))))
            q_val = _run(layer, list(zip(q_val, (kw for _, kw in fp_val))))
            if report is None:
                after = _mse(q_val, val_targets)
                report = LayerReport(i, before, after, time.monotonic() - t0, False)
                _save_layer(saved, tensors, report)
            reports.append(report)
            states.update({p: t.to_state(p) for p, t in tensors.items()})
            fp_train = [(y, kw) for y, (_, kw) in zip(targets, fp_train)]
            fp_val = [(y, kw) for y, (_, kw) in zip(val_targets, fp_val)]
            if progress:
                bar.console.print(_report_line(report, len(layers)))
            bar.advance(layer_task)
    return states, reports


def _report_line(r: LayerReport, n_layers: int) -> str:
    change = 100 * (r.loss_after / r.loss_before - 1) if r.loss_before else 0.0
    return (f"layer {r.index + 1:>3}/{n_layers}  val MSE {r.loss_before:.4g} (RTN) -> {r.loss_after:.4g} "
            f"(learned, {change:+.0f}%)  {r.seconds:.0f} s{'  (resumed)' if r.resumed else ''}")


# ----------------------------------------------------------------------------- one layer
def _optimize_layer(layer, index: int, names: list[str], data, opts: QuantizeOptions, bar, task):
    lo = opts.learned
    learned: dict[str, LearnedLinear] = {}
    for name in names:
        linear = layer.get_submodule(name)
        prefix = f"model.layers.{index}.{name}"
        pairs = disjoint_pairs(linear.in_features, opts.krot, pair_generator(opts.seed, prefix))
        learned[prefix] = LearnedLinear(linear, pairs)
        _set(layer, name, learned[prefix])
    train, val = data
    before = _val_loss(layer, val)
    stage1 = [{"params": [p for m in learned.values() for p in m.stage1_params()], "lr": lo.lr_rotation}]
    _run_stage(layer, stage1, train, val, opts, index, 1, bar, task)
    weights, quantizers = zip(*(m.stage2_params() for m in learned.values()))
    stage2 = [{"params": [p for ps in weights for p in ps], "lr": lo.lr_weight},
              {"params": [p for ps in quantizers for p in ps], "lr": lo.lr_quantizer}]
    _run_stage(layer, stage2, train, val, opts, index, 2, bar, task)
    return {prefix: m.packed() for prefix, m in learned.items()}, before


def _run_stage(layer, groups, train, val, opts: QuantizeOptions, index: int, stage: int, bar, task) -> None:
    lo = opts.learned
    params = [p for g in groups for p in g["params"]]
    opt = torch.optim.AdamW(groups, betas=lo.betas, weight_decay=lo.weight_decay)
    total = lo.epochs * len(train)
    start = [g["lr"] for g in groups]
    best_loss, best = _val_loss(layer, val), [p.detach().clone() for p in params]
    bar.reset(task, total=total)
    step = 0
    for epoch in range(lo.epochs):
        bar.update(task, description=f"layer {index + 1} stage {stage} epoch {epoch + 1}/{lo.epochs} (best val {best_loss:.4g})")
        gen = torch.Generator().manual_seed(opts.seed * 1_000_003 + index * 1009 + stage * 101 + epoch)
        for b in torch.randperm(len(train), generator=gen).tolist():
            x, kw, y = train[b]
            loss = torch.nn.functional.mse_loss(_forward(layer, x, kw), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            for g, lr in zip(opt.param_groups, start):  # cosine from lr to lr / 20 over the stage
                g["lr"] = lr / 20 + (lr - lr / 20) * (1 + math.cos(math.pi * step / total)) / 2
            bar.advance(task)
        loss = _val_loss(layer, val)
        if loss < best_loss:
            best_loss, best = loss, [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, b in zip(params, best):
            p.copy_(b)


# ----------------------------------------------------------------------------- helpers
def _forward(layer, x, kw):
    out = layer(x, **kw)
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def _run(layer, batches) -> list[torch.Tensor]:
    return [_forward(layer, x, kw) for x, kw in batches]


@torch.no_grad()
def _val_loss(layer, val) -> float:
    return _mse(_run(layer, [(x, kw) for x, kw, _ in val]), [y for _, _, y in val])


def _mse(outs: list[torch.Tensor], targets: list[torch.Tensor]) -> float:
    return float(sum(torch.nn.functional.mse_loss(o, y, reduction="sum") for o, y in zip(outs, targets))
                 / sum(y.numel() for y in targets))


@torch.no_grad()
def _capture(model, layers, batches, dev) -> list[tuple[torch.Tensor, dict]]:
    """(hidden states entering layer 0, the layer's keyword arguments) per batch of windows."""
    got = []

    def hook(_mod, args, kwargs):
        kw = {k: v for k, v in kwargs.items() if k not in ("past_key_values", "use_cache")}
        hidden = args[0] if args else kw.pop("hidden_states")
        got.append((hidden.detach(), kw))
        raise _Captured

    handle = layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for ids in batches:
            try:
                model(ids.to(dev), use_cache=False)
            except _Captured:
                pass
    finally:
        handle.remove()
    return got


def _linears_per_layer(model, n_layers: int, opts: QuantizeOptions) -> list[list[str]]:
    skip = [re.compile(rx) for rx in (*DEFAULT_SKIP, *opts.skip)]
    names: list[list[str]] = [[] for _ in range(n_layers)]
    for full, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear) or not is_quantized_linear(f"{full}.weight", list(mod.weight.shape), skip):
            continue
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", full)
        if m is None:
            raise QuantizeError(f"{full}: a linear outside the decoder layers, which --rotation learned does not "
                                f"optimize; leave it unquantized with --skip '{re.escape(full)}'")
        check_linear_shape(full, mod.out_features, mod.in_features, "paroquant")
        names[int(m[1])].append(m[2])
    return names


def _set(layer, name: str, module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(layer.get_submodule(parent) if parent else layer, leaf, module)


def _install_reference(layer, tensors: dict[str, ParoTensors], dev) -> None:
    """Replace the layer's linears by the reference numerics of their saved tensors."""
    for prefix, t in tensors.items():
        name = prefix.split(".", 3)[3]
        old = layer.get_submodule(name)
        w = R.dequant_paroquant(t.qweight, t.qzeros, t.scales).to(dev)
        bias = None if old.bias is None else old.bias.detach().float()
        plan = R.rotation_plan(t.pairs.to(dev), t.theta.to(dev))
        _set(layer, name, ReferenceLinear(lambda w=w: w, bias, plan, t.channel_scales.to(dev).float()))


def _open_work_dir(work: Path, src: Path, opts: QuantizeOptions) -> Path:
    settings = {"options": opts.record(), "source": str(src.resolve())}
    path = work / "settings.json"
    if opts.learned.resume and path.is_file():
        old = json.loads(path.read_text())
        if old != settings:
            was, now = _flat(old), _flat(settings)
            diff = sorted(k for k in {**was, **now} if was.get(k) != now.get(k))
            raise QuantizeError(f"--resume: {work} was made with other settings ({', '.join(diff)}); "
                                f"run with the same options, or without --resume to start over")
        return work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    atomic.write_text(path, json.dumps(settings, indent=2) + "\n")
    return work


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _save_layer(path: Path, tensors: dict[str, ParoTensors], report: LayerReport) -> None:
    state = {k: v.contiguous() for p, t in tensors.items() for k, v in t.to_state(p).items()}
    meta = {"loss_before": repr(report.loss_before), "loss_after": repr(report.loss_after), "seconds": repr(report.seconds)}
    atomic.write_bytes(path, save_bytes(state, metadata=meta))


def _load_layer(path: Path, names: list[str]) -> tuple[dict[str, ParoTensors], dict]:
    from safetensors import safe_open

    state = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    index = int(path.stem.split("-")[1])
    tensors = {}
    for name in names:
        prefix = f"model.layers.{index}.{name}"
        tensors[prefix] = ParoTensors.from_state(state, prefix)
        validate(tensors[prefix], prefix)
    return tensors, meta
