"""Session fixtures: the real small Qwen (bf16) and radiance's quantized copies of it.

Built once per machine under RADIANCE_HOME/models/qwen2.5-coder-0.5b/ and reused by every later
session (a stamp file rebuilds a variant when the quantizer changes):

- `qwen_bf16_dir`: bf16/ — Qwen2.5-Coder-0.5B-Instruct from the PyPI GGUF parts;
- `qwen_paro_dir`: paroquant-random-k8-s0/ — int4 RTN under random rotations, krot 8, seed 0,
  random channel scales (exercises pairs, theta and channel_scales on every linear);
- `qwen_paro_identity_dir`: paroquant-identity-k1/ — int4 RTN, one zero-angle rotation layer,
  channel scales 1 (the plain AWQ-style path);
- `qwen_pq2_dir`: pq2/ — ternary, absmean scale per 128 weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest

MODEL = "qwen2.5-coder-0.5b"


def _variant(fmt: str, rotation: str = "identity", krot: int = 1, seed: int = 0) -> Path:
    from radiance.quantize.convert import QuantizeOptions
    from radiance.quantize.variants import ensure_quantized

    return ensure_quantized(MODEL, QuantizeOptions(fmt, rotation, krot, seed))


@pytest.fixture(scope="session")
def qwen_bf16_dir() -> Path:
    from radiance.quantize.fetch import fetch_model

    return fetch_model(MODEL, progress=False)


@pytest.fixture(scope="session")
def qwen_paro_dir(qwen_bf16_dir) -> Path:
    return _variant("paroquant", "random", krot=8, seed=0)


@pytest.fixture(scope="session")
def qwen_paro_identity_dir(qwen_bf16_dir) -> Path:
    return _variant("paroquant", "identity", krot=1)


@pytest.fixture(scope="session")
def qwen_pq2_dir(qwen_bf16_dir) -> Path:
    return _variant("pq2")
