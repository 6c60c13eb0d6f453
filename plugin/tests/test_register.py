"""The entry point registers everything, is idempotent, and a failed registration stops the launch."""

from __future__ import annotations

import subprocess

import pytest

from radiance.testing import servers


@pytest.mark.integration
def test_register_is_idempotent_and_complete():
    import torch

    from radiance.plugin import register

    register()
    register()
    from vllm.model_executor.layers.linear import WEIGHT_LOADER_V2_SUPPORTED
    from vllm.model_executor.layers.quantization import get_quantization_config

    from radiance.plugin.paroquant import ParoQuantConfig
    from radiance.plugin.pq2 import Pq2Config

    assert get_quantization_config("paroquant") is ParoQuantConfig
    assert get_quantization_config("pq2") is Pq2Config
    for name in ("ParoQuantLinearMethod", "Pq2LinearMethod", "SkinnyUnquantizedLinearMethod"):
        assert WEIGHT_LOADER_V2_SUPPORTED.count(name) == 1, name
    assert hasattr(torch.ops.vllm, "radiance_linear")


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "radiance"]
    assert ep.value == "radiance.plugin:register"


# vLLM API drift, as a registration failure would meet it: a name the plugin imports is gone.
SABOTAGE = """
import runpy, vllm.model_executor.layers.linear as L
del L.register_weight_loader_v2_supported_method
runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
"""


@pytest.mark.integration
def test_failed_registration_stops_the_server(tmp_path, tiny):
    model = tiny.write_checkpoint(tmp_path / "ckpt", tiny.quantize_state(tiny.dense_state(), "pq2"), tiny.PQ2_CFG)
    log = tmp_path / "server.log"
    proc, _ = servers.launch(model, ["--enforce-eager"], log, entry=("-c", SABOTAGE))
    try:
        rc = proc.wait(180)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        servers.stop(proc)
    text = log.read_text(errors="replace")
    assert rc not in (None, 0), f"server kept running after a failed plugin registration:\n{text[-3000:]}"
    assert "radiance vLLM plugin failed to register (ImportError" in text, text[-3000:]
