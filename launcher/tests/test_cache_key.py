"""Compile-cache keys: graph knobs change them, other knobs do not, checkpoints never share one."""

import json
import os
from pathlib import Path

from radiance.knobs import KNOBS
from radiance.launcher.argv import vllm_env
from radiance.launcher.cache_key import Versions, cache_key, model_fingerprint
from radiance.launcher.plan import resolve_plan
from radiance.stack import load_stacks

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"
V = Versions("0.32.0", "2.13.0+cpu", "3.9.0", "0.1.0")


def _plan(stack="demo", mode="eval", **env):
    return resolve_plan(load_stacks(EXAMPLE), stack, mode, {**os.environ, **env}, V)


def test_graph_knob_changes_the_key_and_a_non_graph_knob_does_not(launch_home):
    base = _plan()
    assert KNOBS["RADIANCE_PQ_I8"].graph and not KNOBS["RADIANCE_PQ_SKIP"].graph
    i8 = _plan(RADIANCE_PQ_I8="1")
    assert i8.cache_key == base.cache_key + "-i8" and i8.compile_dir != base.compile_dir
    assert _plan(RADIANCE_PQ_SKIP=".*mlp.*").cache_key == base.cache_key
    both = _plan(RADIANCE_PQ_ROT_STREAM="1", RADIANCE_PQ_I8="1")
    assert both.cache_key == base.cache_key + "-i8-rs"  # the knobs' suffixes in name order
    assert _plan(RADIANCE_PQ_I8="0").cache_key == base.cache_key  # at its default: same graph


def test_cache_dirs_follow_the_key(launch_home):
    p = _plan()
    env = vllm_env(p)
    assert env["VLLM_CACHE_ROOT"] == str(launch_home / "compile" / p.cache_key / "vllm")
    assert env["TRITON_CACHE_DIR"] == str(launch_home / "compile" / p.cache_key / "triton")
    assert "TORCHINDUCTOR_CACHE_DIR" not in env  # vLLM sets it under VLLM_CACHE_ROOT itself


def test_versions_are_in_the_key(launch_home):
    p = _plan()
    other = resolve_plan(load_stacks(EXAMPLE), "demo", "eval", os.environ, Versions("0.33.0", "2.13.0+cpu", "3.9.0", "0.1.0"))
    assert p.cache_key != other.cache_key and "vllm0.32.0-torch2.13.0+cpu-triton3.9.0-radiance0.1.0" in p.cache_key


def test_checkpoints_never_share_a_key(tmp_path):
    root = tmp_path / "models"
    a, b = root / "a" / "paroquant", root / "b" / "paroquant"
    for d in (a, b):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "paroquant"}}))
        (d / "model.safetensors").write_bytes(b"0" * 10)
    assert cache_key(a, root, V, {}) != cache_key(b, root, V, {})  # same config, different checkpoint
    before = cache_key(a, root, V, {})
    (a / "model.safetensors").write_bytes(b"0" * 11)  # re-quantized weights of another size
    assert cache_key(a, root, V, {}) != before
    assert cache_key(a, root, V, {}).startswith("a_paroquant-")


def test_fingerprint_is_machine_independent(tmp_path):
    for home in ("one", "two"):
        d = tmp_path / home / "models" / "q"
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
    fp = [model_fingerprint(tmp_path / h / "models" / "q", tmp_path / h / "models") for h in ("one", "two")]
    assert fp[0] == fp[1]
