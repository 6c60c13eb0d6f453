"""Session fixtures: the real small Qwen (bf16) and radiance's quantized copies of it.

Built once per machine under RADIANCE_HOME/models/qwen2.5-coder-0.5b/ and reused by every later
session (a stamp file rebuilds a variant when the quantizer changes):

- `qwen_bf16_dir`: bf16/ — Qwen2.5-Coder-0.5B-Instruct from the PyPI GGUF parts;
- `qwen_paro_dir`: paroquant-random-k8-s0/ — int4 RTN under random rotations, krot 8, seed 0,
  random channel scales (exercises pairs, theta and channel_scales on every linear);
- `qwen_paro_identity_dir`: paroquant-identity-k1/ — int4 RTN, one zero-angle rotation layer,
  channel scales 1 (the plain AWQ-style path);
- `qwen_pq2_dir`: pq2/ — ternary, absmean scale per 128 weights;
- `qwen_mxfp4_dir`: mxfp4-rotations-of-paroquant-learned-k8-s0-n4-l32-e1/ — MXFP4-PARO: OCP MXFP4
  under the learned checkpoint's rotations (`--rotations-from`: the MXFP4 grid learns none of its own);
- `qwen_paro_learned_dir`: paroquant-learned-k8-s0-n4-l32-e1/ — `--rotation learned` on 4 windows
  of 32 tokens, one epoch per stage: real learned angles, scales and fine-tuned weights in ~1 min
  of CPU (a checkpoint for the format and the serving path, not for its quality).
"""

from __future__ import annotations

from pathlib import Path

import pytest

MODEL = "qwen2.5-coder-0.5b"


def _variant(fmt: str, rotation: str = "identity", krot: int = 1, seed: int = 0, learned=None,
             rotations_from: Path | None = None) -> Path:
    from radiance.quantize.convert import QuantizeOptions
    from radiance.quantize.variants import ensure_quantized

    return ensure_quantized(MODEL, QuantizeOptions(fmt, rotation, krot, seed, learned=learned,
                                                   rotations_from=rotations_from))


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


@pytest.fixture(scope="session")
def qwen_paro_learned_dir(qwen_bf16_dir) -> Path:
    from radiance.quantize.convert import single_thread
    from radiance.quantize.learned_options import LearnedOptions

    with single_thread():  # the shared 2-core machine: see convert.single_thread
        return _variant("paroquant", "learned", krot=8, learned=LearnedOptions(samples=4, seq_len=32, epochs=1))


@pytest.fixture(scope="session")
def qwen_mxfp4_dir(qwen_paro_learned_dir) -> Path:
    return _variant("paroquant_mxfp4", "random", krot=8, rotations_from=qwen_paro_learned_dir)
