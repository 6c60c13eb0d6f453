"""Quantized variants of a fetched model, built once under RADIANCE_HOME/models/<name>/<variant>/.

Every quantized directory carries `radiance-quantize.json` (quantizer version, options, source);
a cached variant whose record differs is rebuilt, so a quantizer change never serves stale weights.
A file lock serialises concurrent builders (parallel test sessions, the demo script).
"""

from __future__ import annotations

import json
from pathlib import Path

from filelock import FileLock

from radiance.kernels import methods
from radiance.quantize.convert import QUANTIZER_VERSION, RECORD, QuantizeOptions, quantize_checkpoint
from radiance.quantize.fetch import fetch_model, is_complete, model_root


def variant_name(opts: QuantizeOptions) -> str:
    """The method's variant name (kernels/methods), then, for a rotated method, where its rotations
    come from."""
    spec = methods.get(opts.format)
    if not spec.rotated:
        return spec.variant
    if opts.rotations_from is not None:
        return f"{spec.variant}-rotations-of-{Path(opts.rotations_from).name}"
    if opts.rotation == "identity":
        return f"{spec.variant}-identity-k{opts.krot}"
    if opts.rotation == "learned":
        lo = opts.learned
        return f"{spec.variant}-learned-k{opts.krot}-s{opts.seed}-n{lo.samples}-l{lo.seq_len}-e{lo.epochs}"
    return f"{spec.variant}-random-k{opts.krot}-s{opts.seed}"


def is_current(out: Path, opts: QuantizeOptions) -> bool:
    rec = out / RECORD
    if not (is_complete(out) and rec.is_file()):
        return False
    data = json.loads(rec.read_text())
    return data.get("quantizer_version") == QUANTIZER_VERSION and data.get("options") == opts.record()


def ensure_quantized(model: str, opts: QuantizeOptions, progress: bool = False) -> Path:
    """Fetch `model` if needed, then quantize it with `opts` unless an up-to-date copy exists."""
    src = fetch_model(model, progress=progress)
    out = model_root(model) / variant_name(opts)
    with FileLock(str(out) + ".lock"):
        if not is_current(out, opts):
            quantize_checkpoint(src, out, opts, progress=progress)
    return out
