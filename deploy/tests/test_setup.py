"""`radiance setup`: --check changes nothing; a second run changes nothing and says so; a
downloaded checkpoint is checked and its sums recorded; a broken one is refused; sha256 checks.

Setup cost: none (temporary RADIANCE_HOME and unit dir; image steps only query podman; the small
Qwen from the model cache). ~10 s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance.checksums import write_manifest
from radiance.cli import app
from radiance.deploy import setup as setup_mod
from radiance.deploy import unitspec
from radiance.stack import load_stacks
from radiance.testing import tiny_model as tm

EXAMPLE = Path(unitspec.__file__).parent / "stacks.example.yaml"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()} if root.exists() else {}


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / "models").mkdir(parents=True)
    monkeypatch.setenv("RADIANCE_HOME", str(h))
    monkeypatch.delenv("RADIANCE_STACKS", raising=False)
    return h


def test_check_reports_what_is_missing_and_changes_nothing(home, tmp_path):
    units = tmp_path / "units"
    before = _tree(home)
    r = CliRunner().invoke(app, ["setup", "--check", "--stacks", str(EXAMPLE), "--unit-dir", str(units),
                                 "--quadlet-dir", str(tmp_path / "quadlet")])
    assert r.exit_code == 1, r.output
    out = " ".join(r.output.split())
    if not Path("/dev/kfd").exists():
        assert "no AMD GPU: /dev/kfd is missing" in out
    if not Path("/dev/nvidia0").exists():
        assert "no NVIDIA GPU" in out
    assert "Qwen3.8-27B-PARO does not exist" in out
    assert "would write radiance-demo.service" in out
    assert "check only: nothing was changed" in out
    assert not units.exists() and _tree(home) == before


def _demo_stack(tmp_path: Path, model: Path, extra: str = "") -> Path:
    f = tmp_path / "stacks.yaml"
    f.write_text(f"version: 1\nstacks:\n  demo:\n    arch: cpu\n    model: {model}\n    quant: paroquant\n"
                 f"    port: 18765\n{extra}")
    return f


def _checkpoint(d: Path, manifest: bool = True) -> Path:
    """The tiny Qwen2 in paroquant, as radiance's quantizer writes it (with SHA256SUMS) or as a
    download has it (without)."""
    tm.write_checkpoint(d, tm.quantize_state(tm.dense_state(), "paroquant"), tm.PARO_CFG)
    if manifest:
        write_manifest(d)
    return d


def _setup(tmp_path: Path, stacks: Path, *extra: str):
    r = CliRunner().invoke(app, ["setup", "--stacks", str(stacks), "--unit-dir", str(tmp_path / "units"),
                                 "--quadlet-dir", str(tmp_path / "quadlet"), *extra])
    return r, " ".join(r.output.replace("│", " ").split())  # the table's cells, unwrapped


def test_second_run_changes_nothing_and_says_so(home, tmp_path):
    model = _checkpoint(home / "models" / "demo-ckpt")
    stacks, units = _demo_stack(tmp_path, model), tmp_path / "units"
    first, out1 = _setup(tmp_path, stacks)
    assert "wrote radiance-demo.service" in out1 and "2 files match SHA256SUMS (2 newly hashed)" in out1, first.output
    assert "14 quantized linears fit their format" in out1
    assert (units / "radiance-demo.service").exists()
    snapshot = _tree(units)
    second, out2 = _setup(tmp_path, stacks)
    assert "nothing changed: this host was already set up" in out2, second.output
    assert "newly hashed" not in out2  # verified checksums are remembered by size+mtime
    assert _tree(units) == snapshot


def _step(stacks: Path, check: bool = False, record: bool = False) -> setup_mod.Step:
    (step,) = [s for s in setup_mod.checkpoints(load_stacks(stacks), ["demo"], check, None, record)
               if s.name == "checkpoint demo"]
    return step


def test_a_downloaded_checkpoint_is_checked_and_its_sums_recorded(home, tmp_path, qwen_paro_dir):
    """The small Qwen as downloaded (z-lab's layout, no SHA256SUMS): accepted after its structure is
    checked; --record writes SHA256SUMS, which every later run verifies."""
    model = home / "models" / "dl"
    model.mkdir()
    for p in qwen_paro_dir.iterdir():
        if p.name not in ("SHA256SUMS", "radiance-quantize.json"):
            os.link(p, model / p.name)
    stacks = _demo_stack(tmp_path, model)
    step = _step(stacks)
    assert step.status == "ok", step
    assert "168 quantized linears fit their format; no SHA256SUMS to check the bytes against" in step.detail
    assert "`radiance setup --record`" in step.detail and not (model / "SHA256SUMS").exists()
    step = _step(stacks, check=True, record=True)
    assert step.status == "missing" and "would record SHA256SUMS (--record)" in step.detail
    assert not (model / "SHA256SUMS").exists()
    rec, out = _setup(tmp_path, stacks, "--record")  # the CLI, with its progress bar
    assert "recorded SHA256SUMS over 6 files" in out, rec.output
    assert _step(stacks).status == "ok" and (model / "SHA256SUMS").read_text().count("  ") == 6
    again, out = _setup(tmp_path, stacks, "--record")
    assert "6 files match SHA256SUMS" in out and "newly hashed" not in out, again.output
    assert "checkpoint demo ok" in out
    (model / "generation_config.json").unlink()  # a hard link into the cache: replace, never edit it
    (model / "generation_config.json").write_text("{}")
    step = _step(stacks)
    assert step.status == "missing" and step.detail == f"{model}: generation_config.json sha256 mismatch"


def test_a_broken_checkpoint_is_refused_naming_the_file(home, tmp_path):
    model = _checkpoint(home / "models" / "m", manifest=False)
    shard = model / "model.safetensors"
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size // 2)  # an interrupted download
    stacks = _demo_stack(tmp_path, model)
    r, out = _setup(tmp_path, stacks, "--record")
    assert r.exit_code == 1 and f"{shard}: tensor" in out and "the file is cut short" in out, r.output
    assert not (model / "SHA256SUMS").exists()  # nothing recorded over a broken checkpoint
    assert _step(stacks, record=True).status == "missing"


def test_checksum_mismatch_is_reported(home):
    model = _checkpoint(home / "models" / "ckpt")
    (model / "config.json").write_text(json.dumps({**tm.tiny_config(tm.PARO_CFG), "changed": True}))
    status, detail = setup_mod.verify_checkpoint(model, "paroquant", check=True)
    assert status == "missing" and "config.json sha256 mismatch" in detail


def test_a_container_user_must_be_able_to_read_the_checkpoint(home, tmp_path):
    model = _checkpoint(home / "models" / "m", manifest=False)
    (model / "model.safetensors").chmod(0o600)  # what safetensors writes
    write_manifest(model)
    stacks = tmp_path / "stacks.yaml"
    native = "version: 1\nstacks:\n  s:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 1\n"
    stacks.write_text(native)
    (step,) = setup_mod.checkpoints(load_stacks(stacks), ["s"], check=True, progress=None)
    assert step.status == "ok", step  # a native stack reads it as root
    stacks.write_text(native + "    runtime: podman\n    image: localhost/x\n")
    (step,) = setup_mod.checkpoints(load_stacks(stacks), ["s"], check=True, progress=None)
    assert step.status == "missing" and "model.safetensors not readable by the container's user 10001" in step.detail
    assert f"chmod -R a+rX {model}" in step.detail
