"""Placing a user's checkpoint where a stack expects it: `radiance setup` puts the `source` of a
stack's `model` (or `drafter.model`) into that directory when it is not there yet.

A source is a checkpoint directory; a Hugging Face cache entry (`.../hub/models--ORG--NAME`, whose
`refs/main` names the snapshot, or one of its `snapshots/<revision>` directories, whose files are
symlinks into `blobs/`); or `hf:ORG/NAME`, that entry looked up in the Hugging Face cache
(`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`). Nothing is downloaded: setup
runs where the network may not reach. A relative path is relative to the stack file's directory.

Idempotent: a destination that already holds every source file at the same size is left alone;
one that differs is reported and never overwritten. Files are hard-linked where the destination is
on the source's filesystem (no second copy of tens of GB) and copied otherwise; either way into a
hidden directory beside the destination that is renamed into place only when complete, so an
interrupted run leaves no half checkpoint under the model's name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from radiance import atomic

Progress = Callable[[str, int, int], None]  # (label, bytes done, bytes total)
HF_PREFIX = "hf:"
CHUNK = 16 << 20


class PlaceError(ValueError):
    """A source that cannot be placed; the message says which path and what to do."""


def hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _snapshot(entry: Path) -> Path:
    """The snapshot directory of a Hugging Face cache entry (`refs/main`, else its only snapshot)."""
    ref = entry / "refs" / "main"
    if ref.is_file():
        snap = entry / "snapshots" / ref.read_text().strip()
        if not snap.is_dir():
            raise PlaceError(f"{ref} names revision {snap.name}, but {snap} is missing: the download did not finish")
        return snap
    snaps = sorted(p for p in (entry / "snapshots").iterdir() if p.is_dir())
    if len(snaps) != 1:
        raise PlaceError(f"{entry} has no refs/main and {len(snaps)} snapshots"
                         f"{': ' + ', '.join(p.name for p in snaps) if snaps else ''}; name one of "
                         f"{entry / 'snapshots'}/<revision> as the source")
    return snaps[0]


def resolve(source: str, base: Path) -> Path:
    """The checkpoint directory `source` means (see the module docstring); PlaceError if none."""
    if source.startswith(HF_PREFIX):
        repo = source[len(HF_PREFIX):].strip("/")
        if repo.count("/") != 1:
            raise PlaceError(f"{source!r}: write hf:ORG/NAME, e.g. hf:z-lab/Qwen3.8-27B-PARO")
        entry = hf_cache() / f"models--{repo.replace('/', '--')}"
        if not entry.is_dir():
            raise PlaceError(f"{source}: {repo} is not in the Hugging Face cache ({entry} does not exist); "
                             f"download it first (`huggingface-cli download {repo}`), or point HF_HUB_CACHE / "
                             "HF_HOME at the cache that has it")
        d = _snapshot(entry)
    else:
        p = Path(source).expanduser()
        p = p if p.is_absolute() else base / p
        if not p.is_dir():
            raise PlaceError(f"source {p} is not a directory")
        d = _snapshot(p) if (p / "snapshots").is_dir() else p
    if not (d / "config.json").is_file():
        raise PlaceError(f"{d} has no config.json: not a checkpoint directory")
    return d


def files(d: Path) -> dict[str, Path]:
    """Relative name -> path of the checkpoint's files (symlinks followed; hidden entries, such as a
    download tool's `.cache/`, left out)."""
    out = {}
    for p in sorted(d.rglob("*")):
        rel = p.relative_to(d)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        out[rel.as_posix()] = p
    return out


def differences(src: Path, dest: Path) -> list[str]:
    """Source files the destination lacks or holds at another size."""
    have = files(dest)
    out = []
    for rel, p in files(src).items():
        if rel not in have:
            out.append(f"{rel} missing")
        elif have[rel].stat().st_size != p.stat().st_size:
            out.append(f"{rel} is {have[rel].stat().st_size} bytes, the source's {p.stat().st_size}")
    return out


def _copy(src: Path, dst: Path, label: str, done: int, total: int, progress: Progress | None) -> int:
    with src.open("rb") as fi, dst.open("wb") as fo:
        while chunk := fi.read(CHUNK):
            fo.write(chunk)
            done += len(chunk)
            if progress:
                progress(label, done, total)
    shutil.copystat(src, dst)
    return done


def place(src: Path, dest: Path, progress: Progress | None = None) -> tuple[int, int, int]:
    """Put every file of checkpoint `src` into `dest` (which must not exist): (files, linked, bytes)."""
    todo = files(src)
    total = sum(p.stat().st_size for p in todo.values())
    label = f"placing {dest.name}"
    done = linked = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    there = dest.parent.stat().st_dev  # files on another file system are copied, the rest hard-linked
    copied = sum(p.resolve().stat().st_size for p in todo.values() if p.resolve().stat().st_dev != there)
    try:
        with atomic.directory(dest, needs_bytes=copied) as tmp:
            tmp.chmod(0o755)  # a container's non-root user reads the checkpoint (mkdtemp makes 0700)
            for rel, p in todo.items():
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                real = p.resolve()  # a Hugging Face snapshot's files are symlinks into blobs/
                try:
                    os.link(real, target)
                    linked += 1
                    done += real.stat().st_size
                    if progress:
                        progress(label, done, total)
                except OSError:  # another filesystem (EXDEV) or no permission to link: copy the bytes
                    done = _copy(real, target, label, done, total, progress)
    except atomic.NoSpaceError as e:  # refused before anything was written
        raise PlaceError(e.strerror) from None
    return len(todo), linked, total
