"""Where radiance keeps what it downloads and builds (all under RADIANCE_HOME)."""

from __future__ import annotations

from pathlib import Path

from radiance.knobs import knob


def home() -> Path:
    return Path(knob("RADIANCE_HOME")).expanduser()  # type: ignore[arg-type]


def models_dir() -> Path:
    return home() / "models"


def kernel_cache_dir() -> Path:
    return home() / "kernels"


def compile_cache_root() -> Path:
    return home() / "compile"


def state_dir() -> Path:
    return home() / "state"
