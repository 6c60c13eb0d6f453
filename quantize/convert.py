"""`radiance quantize`: an HF bf16/fp16 Llama/Qwen-family checkpoint -> paroquant, paroquant_mxfp4 or pq2.

Every 2-D `<prefix>.weight` whose module name matches no skip regex is quantized per nn.Linear
(q/k/v/o/gate/up/down separately; vLLM merges them at load). Everything else (embeddings,
lm_head, norms, biases) is copied unchanged. Output shards mirror the source shards.

paroquant: asymmetric int4 RTN per 128-group of rotate(W / cs), so that
`((x * cs) R^T) dequant(Q)^T ~= x W^T` (kernels/reference.py). Rotations:
- identity: krot layers of pairs (0,1),(2,3),... with angle 0, channel_scales 1;
- random: per linear, per layer, per group a random permutation read two by two, angles uniform in
  [-pi, pi), channel_scales log-uniform in [2^-1/4, 2^1/4] (so a path that drops the scales shows
  up in the quality numbers). Seeded per linear from (seed, module name): reproducible.
- learned: ParoQuant's layer-wise optimizer on calibration text (quantize/learned.py).
paroquant_mxfp4: OCP MXFP4 RTN (quantize/rtn.mxfp4_ocp) of rotate(W / cs), the rotations as above
or, with `--rotations-from`, copied from a paroquant checkpoint of the same model (a learned one:
the rotations that tame int4's per-group outliers do the same for e2m1).
pq2: ternary codes with an absmean scale per 128 weights.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import shutil
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from safetensors import safe_open
from safetensors.torch import save_file

from radiance import atomic
from radiance.checkpoint import DTYPE_BYTES
from radiance.checksums import write_manifest
from radiance.kernels import methods
from radiance.kernels.formats import FORMAT_KEY, FORMAT_VERSION
from radiance.kernels.formats import paroquant as paro_fmt
from radiance.progress import bar as progress_bar
from radiance.quantize import rtn
from radiance.quantize.learned_options import LearnedOptions, LearnedOptionsError

# left in 16 bit: embeddings, lm_head, norms, a vision tower, and the gated-delta-net gate projections
# of Qwen3.5 / Qwen3-Next (in_proj_b / in_proj_a, fused on disk as in_proj_ba; a few rows each), which
# the plugin keeps in 16 bit too (plugin/skip.py)
DEFAULT_SKIP = (r"(^|\.)embed_tokens$", r"(^|\.)lm_head$", r"norm", r"(^|\.)visual\.", r"(^|\.)in_proj_(a|b|ba)$")
FORMATS = methods.CHECKPOINT_METHODS
ROTATIONS = ("identity", "random", "learned")
MAX_KROT = paro_fmt.MAX_KROT
# bump when the quantizer's output for the same options changes (cached variants are rebuilt)
QUANTIZER_VERSION = 1
RECORD = "radiance-quantize.json"  # written into every output: version, options, source dir


class QuantizeError(ValueError):
    pass


@dataclass
class QuantizeOptions:
    format: str
    rotation: str = "random"
    krot: int = 8
    seed: int = 0
    skip: tuple[str, ...] = field(default_factory=tuple)
    # where the math runs; the codes are the same up to float rounding order, so it is not recorded
    device: str = field(default="cpu", compare=False)
    learned: LearnedOptions | None = None  # the optimizer's settings, with --rotation learned only
    rotations_from: Path | None = None  # paroquant_mxfp4: a paroquant checkpoint whose rotations are copied

    def check(self) -> None:
        if self.format not in FORMATS:
            raise QuantizeError(f"--format {self.format!r}: use one of {', '.join(FORMATS)}")
        if self.rotation not in ROTATIONS:
            raise QuantizeError(f"--rotation {self.rotation!r}: use one of {', '.join(ROTATIONS)}")
        if not 1 <= self.krot <= MAX_KROT:
            raise QuantizeError(f"--krot {self.krot}: must be between 1 and {MAX_KROT}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise QuantizeError(f"--device {self.device!r}: use cpu or cuda")
        if self.device != "cpu" and not torch.cuda.is_available():
            raise QuantizeError(f"--device {self.device}: no CUDA GPU is visible here; use --device cpu")
        if self.rotations_from is not None:
            self._check_donor()
        if self.rotation == "learned":
            if self.format != "paroquant":
                raise QuantizeError("--rotation learned applies to --format paroquant only"
                                    + ("; for paroquant_mxfp4, learn a paroquant checkpoint and pass it as "
                                       "--rotations-from" if self.format == "paroquant_mxfp4" else ""))
            self.learned = self.learned or LearnedOptions()
            try:
                self.learned.check()
            except LearnedOptionsError as e:
                raise QuantizeError(str(e)) from None
        elif self.learned is not None:
            raise QuantizeError(f"--calib/--samples/--seq-len/--epochs/--resume need --rotation learned (got {self.rotation})")
        for rx in self.skip:
            try:
                re.compile(rx)
            except re.error as e:
                raise QuantizeError(f"--skip {rx!r} is not a valid regex: {e}") from None

    def _check_donor(self) -> None:
        if self.format != "paroquant_mxfp4":
            raise QuantizeError(f"--rotations-from applies to --format paroquant_mxfp4 only (got {self.format})")
        cfg = Path(self.rotations_from) / "config.json"
        try:
            method = json.loads(cfg.read_text()).get("quantization_config", {}).get("quant_method")
        except (OSError, ValueError) as e:
            raise QuantizeError(f"--rotations-from {self.rotations_from}: cannot read {cfg}: {e}") from None
        if method != "paroquant":
            raise QuantizeError(f"--rotations-from {self.rotations_from}: quantized as {method!r}, not paroquant "
                                "(the rotations come from a paroquant checkpoint of the same model)")

    def record(self) -> dict:
        rec = {**asdict(self), "skip": list(self.skip)}
        if self.rotations_from is None:
            del rec["rotations_from"]
        else:
            rec["rotations_from"] = str(Path(self.rotations_from).resolve())
        del rec["device"]
        if self.learned is None:
            del rec["learned"]
        else:  # a learned result depends on the device's float order: recorded
            rec["learned"] = self.learned.record(self.device)
        return rec

    def quantization_config(self) -> dict:
        spec = methods.get(self.format)
        cfg = {"quant_method": spec.checkpoint, "bits": spec.bits, "group_size": spec.group_size}
        if spec.rotated:
            cfg["krot"] = self.krot
        cfg[FORMAT_KEY] = FORMAT_VERSION  # the plugin refuses a major version it does not read
        if self.skip:  # the plugin must know these linears stay 16-bit (its own list covers the defaults)
            cfg["modules_to_not_convert"] = list(self.skip)
        return cfg


def source_shards(src: Path) -> list[Path]:
    shards = sorted(src.glob("*.safetensors"))
    if not (src / "config.json").is_file():
        raise QuantizeError(f"{src}: no config.json; give a Hugging Face checkpoint directory")
    if not shards:
        raise QuantizeError(f"{src}: no *.safetensors files; give a Hugging Face safetensors checkpoint")
    config = json.loads((src / "config.json").read_text())
    if "quantization_config" in config:
        method = config["quantization_config"].get("quant_method")
        raise QuantizeError(f"{src}/config.json: already quantized ({method}); give a bf16/fp16 checkpoint")
    return shards


def is_quantized_linear(name: str, shape: list[int], skip: list[re.Pattern]) -> bool:
    if not name.endswith(".weight") or len(shape) != 2:
        return False
    module = name.removesuffix(".weight")
    return not any(rx.search(module) for rx in skip)


def quantize_linear(prefix: str, w: torch.Tensor, opts: QuantizeOptions) -> dict[str, torch.Tensor]:
    state = _quantize_linear(prefix, w.to(opts.device), opts)
    return {name: t.cpu() for name, t in state.items()}


def _quantize_linear(prefix: str, w: torch.Tensor, opts: QuantizeOptions) -> dict[str, torch.Tensor]:
    n, k = w.shape
    check_linear_shape(prefix, n, k, opts.format)
    spec = methods.get(opts.format)
    quantize = methods.resolve(spec.quantize)
    if not spec.rotated:
        t = quantize(w)
    else:
        if opts.rotation == "learned":
            raise QuantizeError(f"{prefix}: learned rotations are made per decoder layer (quantize/learned.py)")
        pairs, theta, cs = _rotation(prefix, k, opts)
        # the rotation is drawn on the CPU (the same seed gives the same checkpoint on every device)
        t = quantize(w, pairs.to(w.device), theta.to(w.device), None if cs is None else cs.to(w.device))
    methods.resolve(spec.validate)(t, prefix)
    return t.to_state(prefix)


def _rotation(prefix: str, k: int, opts: QuantizeOptions):
    """(pairs, theta, channel_scales or None) of one linear, on the CPU."""
    if opts.rotations_from is not None:
        return donor_rotation(Path(opts.rotations_from), prefix, opts.krot)
    if opts.rotation == "identity":
        pairs, theta = rtn.identity_rotation(k, opts.krot)
        cs = None
    else:
        # torch seeds its CPU generator from 32 bits only, so mix the seed in within them
        gen = torch.Generator().manual_seed((zlib.crc32(prefix.encode()) + opts.seed * 0x9E3779B1) % 2**32)
        pairs, theta = rtn.random_rotation(k, opts.krot, gen)
        cs = torch.exp2((torch.rand(1, k, generator=gen) - 0.5) * 0.5)
    return pairs, theta, cs


@functools.lru_cache(maxsize=4)
def _donor_shards(donor: Path, stamp: tuple) -> dict[str, Path]:
    """tensor name -> shard of a checkpoint, read once (not once per linear); `stamp`, its shards'
    names and mtimes, makes a rewritten checkpoint a new entry."""
    out: dict[str, Path] = {}
    for name, _ in stamp:
        with safe_open(donor / name, "pt") as f:
            out.update(dict.fromkeys(f.keys(), donor / name))
    return out


def donor_rotation(donor: Path, prefix: str, krot: int):
    """A paroquant checkpoint's rotation of `prefix` (its krot must be the one asked for)."""
    names = [f"{prefix}.{t}" for t in ("pairs", "theta", "channel_scales")]
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(donor.glob("*.safetensors")))
    shard = _donor_shards(donor, stamp).get(names[0])
    if shard is None:
        raise QuantizeError(f"--rotations-from {donor}: no rotation for {prefix} (not the same model, or that linear "
                            "was left unquantized there: --skip it here too)")
    with safe_open(shard, "pt") as f:
        pairs, theta, cs = (f.get_tensor(n) for n in names)
    if pairs.shape[0] != krot:
        raise QuantizeError(f"--rotations-from {donor}: {prefix} has krot {pairs.shape[0]}; give --krot {pairs.shape[0]}")
    return pairs, theta, cs


def check_linear_shape(prefix: str, n: int, k: int, fmt: str) -> None:
    if k % 128:
        raise QuantizeError(
            f"{prefix}.weight: in_features {k} is not a multiple of 128; leave it unquantized with --skip '{re.escape(prefix)}'"
        )
    pack = methods.get(fmt).n_pack
    if n % pack:
        raise QuantizeError(f"{prefix}.weight: out_features {n} is not a multiple of {pack} (the codes' packing "
                            "along N); --skip it")


@contextlib.contextmanager
def single_thread():
    """One torch thread: the per-linear ops are small, and on a shared, oversubscribed machine an
    OpenMP team waiting for a descheduled thread made them up to 200x slower (measured)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def quantize_checkpoint(src: Path, out: Path, opts: QuantizeOptions, progress: bool = True) -> Path:
    """Write the quantized checkpoint to `out` atomically (a failure leaves nothing behind)."""
    if opts.rotation == "learned":  # large ops: torch's own thread count (quantize/learned.py)
        from radiance.quantize.learned import quantize_learned

        return quantize_learned(src, out, opts, progress)
    with single_thread():
        return write_checkpoint(src, out, opts, progress)


def write_checkpoint(src: Path, out: Path, opts: QuantizeOptions, progress: bool,
                     linear_fn=quantize_linear, record_extra: dict | None = None) -> Path:
    """`linear_fn(prefix, weight, opts)` gives each quantized linear's tensors (default: RTN)."""
    opts.check()
    src, out = Path(src), Path(out)
    shards = source_shards(src)
    skip = [re.compile(rx) for rx in (*DEFAULT_SKIP, *opts.skip)]
    plan = []
    for shard in shards:
        with safe_open(shard, "pt") as f:
            plan += [(shard, k) for k in f.keys() if is_quantized_linear(k, f.get_slice(k).get_shape(), skip)]
    if not plan:
        raise QuantizeError(f"{src}: no linear layer left to quantize (all matched the skip regexes)")
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    weight_map: dict[str, str] = {}
    needs = output_bytes(shards, {name for _, name in plan}, opts.format)  # refused at once if it cannot fit
    with atomic.directory(out, needs_bytes=needs) as build, progress_bar(*cols, enabled=progress) as bar:
        task = bar.add_task(f"quantizing to {opts.format}", total=len(plan))
        for shard in shards:
            tensors: dict[str, torch.Tensor] = {}
            todo = {name for s, name in plan if s == shard}
            with safe_open(shard, "pt") as f:
                for name in f.keys():
                    if name in todo:
                        prefix = name.removesuffix(".weight")
                        tensors.update(linear_fn(prefix, f.get_tensor(name), opts))
                        bar.advance(task)
                    else:
                        tensors[name] = f.get_tensor(name)
            save_file(tensors, str(build / shard.name), metadata={"format": "pt"})
            weight_map.update({n: shard.name for n in tensors})
        copy_side_files(src, build, opts, weight_map, multi_shard=len(shards) > 1)
        record = {"quantizer_version": QUANTIZER_VERSION, "options": opts.record(), "source": str(src.resolve()),
                  **(record_extra or {})}
        (build / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        write_manifest(build)  # last: it covers every file above (`radiance setup` checks it)
        for f in build.iterdir():  # safetensors writes 0600; a container's non-root user reads these
            f.chmod(0o644)
        build.chmod(0o755)
    return out


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model")


def copy_tokenizer(src: Path, dest: Path) -> None:
    """Copy the tokenizer / template / generation files an HF directory has."""
    found = [n for n in TOKENIZER_FILES if (Path(src) / n).is_file()]
    if "tokenizer.json" not in found and "tokenizer.model" not in found:
        raise QuantizeError(f"{src}: no tokenizer.json or tokenizer.model to copy")
    for n in found:
        shutil.copy2(Path(src) / n, dest / n)


# Bytes per weight of a quantized linear, codes and their scales / zero points (rotations are noise).
BYTES_PER_WEIGHT = {"paroquant": 0.5 + 2.5 / 128, "paroquant_mxfp4": 0.5 + 1 / 32, "pq2": 34 / 128}


def output_bytes(shards: list[Path], quantized: set[str], fmt: str) -> int:
    """About what the output takes on disk, from the source's shapes (no tensor is loaded): the
    quantized linears at their format's size, every other tensor as it is."""
    total = 0
    for shard in shards:
        with safe_open(shard, "pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                n = math.prod(sl.get_shape())
                total += int(n * BYTES_PER_WEIGHT[fmt]) if name in quantized else n * DTYPE_BYTES[sl.get_dtype()]
    return total


def copy_side_files(src: Path, build: Path, opts: QuantizeOptions, weight_map: dict, multi_shard: bool) -> None:
    for p in src.iterdir():
        if p.is_file() and p.suffix != ".safetensors" and p.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy2(p, build / p.name)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = opts.quantization_config()
    (build / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if multi_shard:
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (build / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
