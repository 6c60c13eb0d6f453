"""`radiance setup` placing a user's checkpoint from its `source`: a Hugging Face cache entry (the
layout `huggingface-cli download` leaves: blobs, snapshot symlinks, refs/main), `hf:ORG/NAME`, a
local directory; idempotent, never overwriting, nothing half-placed after an interruption.

Real files: the small Qwen from the model cache (hard-linked, same filesystem) and the tiny Qwen2
from /dev/shm (another filesystem: copied). No network. ~5 s.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest

from radiance.deploy import place, setup as setup_mod
from radiance.stack import load_stacks
from radiance.testing import tiny_model as tm


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / "models").mkdir(parents=True)
    monkeypatch.setenv("RADIANCE_HOME", str(h))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return h


def hf_cache_entry(hub: Path, repo: str, src: Path, revision: str = "0123abcd") -> Path:
    """`src`'s files laid out as the Hugging Face hub cache stores a download of `repo`."""
    entry = hub / f"models--{repo.replace('/', '--')}"
    snap = entry / "snapshots" / revision
    (entry / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name in ("SHA256SUMS", "radiance-quantize.json"):  # what only radiance writes
            continue
        blob = entry / "blobs" / hashlib.sha256(f.name.encode()).hexdigest()
        os.link(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(revision)
    return entry


def _stacks(tmp_path: Path, source: str, model: str = "paro") -> Path:
    f = tmp_path / "stacks.yaml"
    f.write_text(f"version: 1\nstacks:\n  demo:\n    arch: cpu\n    model: {model}\n    source: {source}\n"
                 "    quant: paroquant\n    port: 18765\n")
    return f


def _steps(stacks: Path, check: bool = False, progress=None) -> dict[str, setup_mod.Step]:
    return {s.name: s for s in setup_mod.checkpoints(load_stacks(stacks), ["demo"], check, progress)}


def test_a_hugging_face_download_is_placed_once(home, tmp_path, qwen_paro_dir):
    hf_cache_entry(tmp_path / "hub", "z-lab/Qwen-Test-PARO", qwen_paro_dir)
    stacks = _stacks(tmp_path, "hf:z-lab/Qwen-Test-PARO")
    dest = home / "models" / "paro"
    s = _steps(stacks, check=True)
    assert s["place checkpoint demo"].status == "missing" and "would place" in s["place checkpoint demo"].detail
    assert not dest.exists() and "checkpoint demo" not in s  # --check: nothing placed, nothing to verify yet

    s = _steps(stacks)
    placed = s["place checkpoint demo"]
    assert placed.status == "changed" and "6 files" in placed.detail and "(6 hard-linked, 0 copied)" in placed.detail
    assert s["checkpoint demo"].status == "ok" and "168 quantized linears fit their format" in s["checkpoint demo"].detail
    assert all(p.is_file() and not p.is_symlink() for p in dest.iterdir())  # the blobs, not the cache's links
    assert (dest / "model.safetensors").stat().st_ino == (qwen_paro_dir / "model.safetensors").stat().st_ino
    assert dest.stat().st_mode & 0o755 == 0o755  # a container's non-root user can enter it

    again = _steps(stacks)
    assert again["place checkpoint demo"].status == "ok" and "holds" in again["place checkpoint demo"].detail
    assert again["checkpoint demo"].status == "ok"


def test_a_local_directory_on_another_filesystem_is_copied_with_progress(home, tmp_path):
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:  # tmpfs: a link across filesystems fails
        src = tm.write_checkpoint(Path(shm) / "tiny", tm.quantize_state(tm.dense_state(), "paroquant"), tm.PARO_CFG)
        seen: list[tuple[str, int, int]] = []
        s = _steps(_stacks(tmp_path, str(src), "tiny"), progress=lambda *a: seen.append(a))
    placed = s["place checkpoint demo"]
    assert placed.status == "changed" and "(0 hard-linked, 2 copied)" in placed.detail, placed
    total = sum(p.stat().st_size for p in (home / "models" / "tiny").iterdir())
    assert seen and seen[-1] == ("placing tiny", total, total)
    assert s["checkpoint demo"].status == "ok"


def test_an_interrupted_placement_leaves_nothing(home, tmp_path, qwen_paro_dir):
    hf_cache_entry(tmp_path / "hub", "z-lab/Qwen-Test-PARO", qwen_paro_dir)
    src = place.resolve("hf:z-lab/Qwen-Test-PARO", tmp_path)

    def interrupt(label, done, total):
        if done > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        place.place(src, home / "models" / "paro", interrupt)
    assert list((home / "models").iterdir()) == []


def test_what_cannot_be_placed_is_named(home, tmp_path, qwen_paro_dir):
    s = _steps(_stacks(tmp_path, "hf:z-lab/Nope"))["place checkpoint demo"]
    assert s.status == "missing" and "z-lab/Nope is not in the Hugging Face cache" in s.detail
    assert "huggingface-cli download z-lab/Nope" in s.detail
    entry = hf_cache_entry(tmp_path / "hub", "z-lab/Qwen-Test-PARO", qwen_paro_dir)
    (entry / "refs" / "main").write_text("feedbeef")
    s = _steps(_stacks(tmp_path, str(entry)))["place checkpoint demo"]
    assert s.status == "missing" and "names revision feedbeef" in s.detail and "did not finish" in s.detail
    s = _steps(_stacks(tmp_path, "downloads/paro"))["place checkpoint demo"]  # relative: beside the stack file
    assert s.status == "missing" and s.detail == f"source {tmp_path / 'downloads' / 'paro'} is not a directory"


def test_a_differing_destination_is_never_overwritten(home, tmp_path, qwen_paro_dir):
    hf_cache_entry(tmp_path / "hub", "z-lab/Qwen-Test-PARO", qwen_paro_dir)
    dest = home / "models" / "paro"
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    s = _steps(_stacks(tmp_path, "hf:z-lab/Qwen-Test-PARO"))
    step = s["place checkpoint demo"]
    assert step.status == "missing" and f"{dest} exists but differs from" in step.detail and "move it away" in step.detail
    assert (dest / "config.json").read_text() == "{}" and len(list(dest.iterdir())) == 1
