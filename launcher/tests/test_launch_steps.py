"""The launch steps before exec, run for real: the kernel step's cache and the plugin check."""

import logging
import os
from pathlib import Path

import pytest

from radiance.launcher.launch import LaunchError, build_step, verify_plugin
from radiance.launcher.plan import resolve_plan
from radiance.launcher.stack import load_stacks

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"


def test_second_launch_builds_no_kernels(launch_home, caplog, monkeypatch):
    """pq2 (sm_86): the first kernel step builds (Triton warm-up entry), the second is a cache hit."""
    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # build_step sets it; restored after the test
    caplog.set_level(logging.INFO, logger="radiance.launch")
    plan = resolve_plan(load_stacks(EXAMPLE), "pq2", "prod", os.environ)
    first = build_step(plan)
    assert first.built and first.path == plan.kernel_dir
    second = build_step(plan)
    assert not second.built and second.path == first.path
    assert f"kernels: built {first.path}" in caplog.text
    assert f"kernels: cache hit {first.path} (0 builds)" in caplog.text
    assert os.environ["TRITON_CACHE_DIR"] == str(plan.compile_dir / "triton")


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
