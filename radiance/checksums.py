"""A checkpoint directory's `SHA256SUMS` (sha256sum's format): written by `radiance quantize`,
checked by `radiance setup` before a stack is served from it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from radiance import atomic

MANIFEST = "SHA256SUMS"
Progress = Callable[[str, int, int], None]  # (label, done, total)


def sha256_file(path: Path, progress: Progress | None = None, label: str = "") -> str:
    h, total, done = hashlib.sha256(), path.stat().st_size, 0
    with path.open("rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(label or f"sha256 {path.name}", done, total)
    return h.hexdigest()


def write_manifest(d: Path, progress: Progress | None = None) -> Path:
    """SHA256SUMS over every file of `d` (recursively, sorted, itself excluded), `sha256sum -c`
    compatible; written in one rename once every file is hashed (an interrupted run leaves none)."""
    lines = [f"{sha256_file(p, progress)}  {p.relative_to(d).as_posix()}"
             for p in sorted(d.rglob("*")) if p.is_file() and p.name != MANIFEST]
    out = d / MANIFEST
    atomic.write_text(out, "\n".join(lines) + "\n", mode=0o644)
    return out


def read_manifest(d: Path) -> list[tuple[str, Path]]:
    """[(digest, file)] listed in `d`/SHA256SUMS; ValueError naming the line when one is malformed."""
    out = []
    for n, line in enumerate((d / MANIFEST).read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise ValueError(f"{d / MANIFEST}:{n}: not a sha256sum line (`<64 hex digits>  <file>`)")
        out.append((parts[0].lower(), d / parts[1].lstrip("*")))
    return out
