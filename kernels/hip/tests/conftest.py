"""The HIP library the GPU tests run: the nvcc build of these sources (the WMMA emulated), both
weight layouts. PQ_HIP_TEST_LIB / PQ_HIP_TEST_LIB_WPERM0: prebuilt libraries (same sources, nvcc;
bench/hip_device_run.sh carries them), else built here for the GPU's own arch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip.build import SRC_DIR, compile_hip


def _build(tmp: Path, wperm: int) -> Path:
    env = os.environ.get("PQ_HIP_TEST_LIB" if wperm else "PQ_HIP_TEST_LIB_WPERM0")
    if env and Path(env).exists():
        return Path(env)
    import torch

    major, minor = torch.cuda.get_device_capability()
    out = tmp / f"pq_wperm{wperm}.so"
    compile_hip(SRC_DIR, f"sm_{major}{minor}", [f"-DPQ_WPERM={wperm}"], out)
    return out


@pytest.fixture(scope="module", params=[1, 0], ids=["wperm1", "wperm0"])
def lib(request, tmp_path_factory) -> pqlib.PqLib:
    return pqlib.load(_build(tmp_path_factory.mktemp("pq"), request.param))
