"""`radiance setup`: --check changes nothing; a second run changes nothing and says so; sha256 checks.

Setup cost: none (temporary RADIANCE_HOME and unit dir; image steps only query podman). ~5 s.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance.checksums import write_manifest
from radiance.cli import app
from radiance.deploy import setup as setup_mod
from radiance.deploy import unitspec
from radiance.stack import load_stacks

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


def _demo_stack(tmp_path: Path, model: Path) -> Path:
    f = tmp_path / "stacks.yaml"
    f.write_text(f"version: 1\nstacks:\n  demo:\n    arch: cpu\n    model: {model}\n    quant: paroquant\n    port: 18765\n")
    return f


def _checkpoint(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(os.urandom(1 << 20))
    (d / "config.json").write_text("{}")
    sums = [f"{hashlib.sha256((d / n).read_bytes()).hexdigest()}  {n}" for n in ("model.safetensors", "config.json")]
    (d / setup_mod.MANIFEST).write_text("\n".join(sums) + "\n")


def test_second_run_changes_nothing_and_says_so(home, tmp_path):
    model = home / "models" / "demo-ckpt"
    _checkpoint(model)
    stacks, units = _demo_stack(tmp_path, model), tmp_path / "units"
    args = ["setup", "--stacks", str(stacks), "--unit-dir", str(units), "--quadlet-dir", str(tmp_path / "quadlet")]
    first = CliRunner().invoke(app, args)
    out1 = " ".join(first.output.split())
    assert "wrote radiance-demo.service" in out1 and "2 files match SHA256SUMS (2 newly hashed)" in out1, first.output
    assert (units / "radiance-demo.service").exists()
    snapshot = _tree(units)
    second = CliRunner().invoke(app, args)
    out2 = " ".join(second.output.split())
    assert "nothing changed: this host was already set up" in out2, second.output
    assert "newly hashed" not in out2  # verified checksums are remembered by size+mtime
    assert _tree(units) == snapshot


def test_checksum_mismatch_is_reported(home):
    model = home / "models" / "ckpt"
    _checkpoint(model)
    (model / "config.json").write_text('{"changed": true}')
    status, detail = setup_mod.verify_checkpoint(model, check=True)
    assert status == "missing" and "config.json sha256 mismatch" in detail
    (model / setup_mod.MANIFEST).unlink()
    status, detail = setup_mod.verify_checkpoint(model, check=True)
    assert status == "missing" and "has no SHA256SUMS" in detail


def test_a_container_user_must_be_able_to_read_the_checkpoint(home, tmp_path):
    model = home / "models" / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
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
