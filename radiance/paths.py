"""Where radiance keeps what it downloads and builds (all under RADIANCE_HOME; caches may live apart
under RADIANCE_CACHE, as the system layout does: /var/lib/radiance and /var/cache/radiance)."""

from __future__ import annotations

from pathlib import Path

from radiance.knobs import knob


def home() -> Path:
    return Path(knob("RADIANCE_HOME")).expanduser()  # type: ignore[arg-type]


def cache_root() -> Path:
    """Rebuildable caches (kernels, compile caches): RADIANCE_CACHE, else RADIANCE_HOME."""
    c = knob("RADIANCE_CACHE")
    return Path(c).expanduser() if c else home()


def models_dir() -> Path:
    return home() / "models"


def kernel_cache_dir() -> Path:
    return cache_root() / "kernels"


def compile_cache_root() -> Path:
    return cache_root() / "compile"


def stack_cache_dir(stack: str) -> Path:
    """A container stack's own kernel and compile caches: no stack can plant a kernel another loads."""
    return cache_root() / "stacks" / stack


def state_dir() -> Path:
    return home() / "state"
