"""The launch steps before exec, run for real: the kernel step's cache and the plugin check."""

import json
import logging
import os
from pathlib import Path

import pytest

from radiance import __version__
from radiance.compat import VLLM_RANGE
from radiance.kernels.build import KernelBuildError
from radiance.launcher.launch import LaunchError, build_step, verify_plugin
from radiance.launcher.plan import resolve_plan
from radiance.stack import load_stacks
from radiance.testing import tiny_model as tm
from radiance.testing.vllm_dist import write_vllm_dist

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"


def _nvidia_stack(tmp_path: Path, home: Path) -> Path:
    """A native sm_90 stack serving the tiny paroquant checkpoint (written under `home`)."""
    tm.write_checkpoint(home / "models" / "tiny-paro", tm.quantize_state(tm.dense_state(), "paroquant"), tm.PARO_CFG)
    f = tmp_path / "stacks.yaml"
    (tmp_path / "chat.jinja").write_text("{{ messages[0].content }}")
    f.write_text("version: 1\nstacks:\n  tiny:\n    arch: sm_90\n    model: tiny-paro\n    quant: paroquant\n"
                 "    devices: [0]\n    port: 8199\n    chat_template: chat.jinja\n")
    return f


def test_nvidia_kernel_step_needs_the_gpu_and_leaves_nothing(launch_home, tmp_path):
    """Without a CUDA device the warm-up cannot compile for the GPU the stack serves on: a clear
    error (the launcher's device check refuses such a machine first; this is the step's own guard)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: test_second_launch_compiles_nothing runs the step for real")
    plan = resolve_plan(load_stacks(_nvidia_stack(tmp_path, launch_home)), "tiny", "prod", os.environ)
    with pytest.raises(KernelBuildError, match="sees no CUDA device"):
        build_step(plan)
    assert not [p for p in plan.kernel_cache.glob("*") if not p.name.startswith(".")]


@pytest.mark.gpu
def test_second_launch_compiles_nothing(launch_home, tmp_path, caplog):
    """sm_90: the first kernel step warms the checkpoint's kernels into the stack's Triton cache;
    the second is a cache hit and Triton's cache gains no kernel."""
    from radiance.kernels.warmup import cache_entries

    caplog.set_level(logging.INFO, logger="radiance.launch")
    plan = resolve_plan(load_stacks(_nvidia_stack(tmp_path, launch_home)), "tiny", "prod", os.environ)
    triton_dir = plan.compile_dir / "triton"
    first = build_step(plan)
    report = json.loads((first.path / "warm.json").read_text())
    assert first.built and report["specs"] == 4 and report["compiled"] > 0
    assert report["compiled"] == cache_entries(triton_dir)
    second = build_step(plan)
    assert not second.built and second.path == first.path
    assert cache_entries(triton_dir) == report["compiled"]
    assert f"kernels: cache hit {first.path} (0 builds)" in caplog.text


def test_cpu_kernel_step_builds_nothing(launch_home, caplog):
    caplog.set_level(logging.INFO, logger="radiance.launch")
    plan = resolve_plan(load_stacks(EXAMPLE), "demo", "eval", os.environ)
    res = build_step(plan)
    assert (res.path, res.built) == (None, False)
    assert not (launch_home / "kernels").exists()


def test_plugin_registers_the_quant_methods():
    pytest.importorskip("vllm")
    verify_plugin("paroquant")
    verify_plugin("pq2")
    with pytest.raises(LaunchError, match="did not register quant method 'int3magic'"):
        verify_plugin("int3magic")


def test_in_its_container_a_podman_stack_names_the_images_vllm(launch_home, tmp_path, monkeypatch):
    from radiance.launcher import launch as launch_mod

    monkeypatch.syspath_prepend(str(write_vllm_dist(tmp_path / "site", "0.33.0")))
    monkeypatch.setattr(launch_mod, "in_container", lambda: True)  # where the unit runs radiance-launch
    with pytest.raises(launch_mod.LaunchError) as e:
        launch_mod.launch("paro", EXAMPLE, "prod", False)
    assert str(e.value).startswith(f"the image localhost/radiance-rocm:latest has vLLM 0.33.0, but radiance "
                                   f"{__version__} is tested with vllm {VLLM_RANGE}; rebuild the image")
