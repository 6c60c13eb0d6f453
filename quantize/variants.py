"""Quantized variants of a fetched model, built once under RADIANCE_HOME/models/<name>/<variant>/.

A variant directory carries `radiance-quantize.json` (the options and QUANTIZER_VERSION); a
directory whose stamp differs is rebuilt, so a quantizer change never serves stale weights.
A file lock serialises concurrent builders (parallel test sessions, the demo script).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock

from radiance.quantize.convert import QuantizeOptions, quantize_checkpoint
from radiance.quantize.fetch import fetch_model, is_complete, model_root

# bump when the quantizer's output for the same options changes
QUANTIZER_VERSION = 1
STAMP = "radiance-quantize.json"


def variant_name(opts: QuantizeOptions) -> str:
    if opts.format == "pq2":
        return "pq2"
    if opts.rotation == "identity":
        return f"paroquant-identity-k{opts.krot}"
    return f"paroquant-random-k{opts.krot}-s{opts.seed}"


def _stamp(opts: QuantizeOptions) -> dict:
    return {"quantizer_version": QUANTIZER_VERSION, **asdict(opts), "skip": list(opts.skip)}


def ensure_quantized(model: str, opts: QuantizeOptions, progress: bool = False) -> Path:
    """Fetch `model` if needed, then quantize it with `opts` unless an up-to-date copy exists."""
    src = fetch_model(model, progress=progress)
    out = model_root(model) / variant_name(opts)
    with FileLock(str(out) + ".lock"):
        stamp = out / STAMP
        if is_complete(out) and stamp.is_file() and json.loads(stamp.read_text()) == _stamp(opts):
            return out
        quantize_checkpoint(src, out, opts, progress=progress, stamp=(STAMP, _stamp(opts)))
    return out
