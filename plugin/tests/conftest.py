"""Tiny real checkpoints (a 2-layer Qwen2 in the paroquant / pq2 formats) and an in-process vLLM
loader: vLLM's own EngineArgs -> VllmConfig -> get_model, the path a server takes to load weights,
in seconds instead of a server start. (The served tests' transformers reference:
radiance/testing/served.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

from radiance.testing.tiny_model import (
    H, I, LAYERS, MXFP4_CFG, PARO_CFG, PQ2_CFG, dense_state, quantize_state, write_checkpoint,
)


@pytest.fixture(scope="session")
def tiny_dense() -> dict[str, torch.Tensor]:
    return dense_state()


@pytest.fixture(scope="session")
def vllm_dist():
    """vLLM's distributed state for one in-process rank (gloo), set up once per session."""
    from radiance.plugin import register

    register()
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(1, 1)
    yield


def load_in_vllm(model_dir: Path, **engine_kw):
    """Build the VllmConfig a server would and load the model with vLLM's default loader."""
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.worker.cpu import shm  # noqa: F401  (the CPU worker's torch.accelerator shims)

    kw = {"skip_tokenizer_init": True, "enforce_eager": True, "max_model_len": 256, **engine_kw}
    args = EngineArgs(model=str(model_dir), **kw)
    cfg = args.create_engine_config()
    with set_current_vllm_config(cfg):
        model = get_model(vllm_config=cfg)
    return model, cfg


@pytest.fixture(scope="session")
def tiny():
    """The helpers above, for test modules (conftest modules cannot be imported by name)."""
    import types

    return types.SimpleNamespace(
        LAYERS=LAYERS, H=H, I=I, PARO_CFG=PARO_CFG, PQ2_CFG=PQ2_CFG, MXFP4_CFG=MXFP4_CFG, dense_state=dense_state,
        quantize_state=quantize_state, write_checkpoint=write_checkpoint, load_in_vllm=load_in_vllm,
    )
