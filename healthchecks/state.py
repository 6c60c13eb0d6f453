"""What the launcher and vllm-switch record for the exporter: one small JSON file per (kind, name).

Written atomically, so a reader sees the old record or the new one, never half of either.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from radiance import atomic, paths


def _path(kind: str, name: str, root: Path | None = None) -> Path:
    return (root or paths.state_dir()) / kind / f"{name}.json"


def write_state(kind: str, name: str, data: dict[str, Any], root: Path | None = None) -> Path:
    p = _path(kind, name, root)
    record = {"written_at": time.time(), **data}
    atomic.write_text(p, json.dumps(record, indent=1, sort_keys=True))
    return p


def read_state(kind: str, name: str, root: Path | None = None) -> dict[str, Any] | None:
    p = _path(kind, name, root)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        return None


def read_all(kind: str, root: Path | None = None) -> dict[str, dict[str, Any]]:
    d = (root or paths.state_dir()) / kind
    return {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))} if d.is_dir() else {}
