"""What the launcher and vllm-switch record for the exporter: one small JSON file per (kind, name).

Written atomically, so a reader sees the old record or the new one, never half of either. Files live
under `state_dir()/<kind>/<name>.json`; nothing shares process state. `write_state` adds
`written_at` (unix seconds) and, for the kinds below, validates the record against its schema, so a
writer learns of a wrong field at once rather than from a metric that silently stays empty.

The records the exporter reads (field names are the JSON keys):

kind "launch", name = the stack — written by `radiance-launch` just before it execs vLLM
(`record_launch`); one file per stack, the latest launch wins:
    stack              str    stack name (same as the file name)
    mode               str    "eval" | "prod"
    phases             {str: float}  seconds per launcher phase, named by the launcher ("resolve":
                              stack file, template, cache key; "device"; "kernel_build"; "plugin");
                              every name is exported as it comes
    kernel_builds      int    kernels compiled in this launch
    kernel_cache_hits  int    kernels taken from the kernel cache
    cache_key          str    the compile-cache key (directory name under compile/)
    radiance_version   str
    vllm_version       str
    model              str    model name the server lists in /v1/models (served model name)
    exec_at            float  optional: unix time of the exec into vLLM; with the "ready" record
                              below it gives the "exec_to_ready" phase

kind "switch", name = `switch_name(at, to)` (time-ordered, one file per switch, so the exporter
can count switches by outcome across its own restarts) — written by vllm-switch (`record_switch`):
    from        str | null  stack that was running before (null: none)
    to          str         stack asked for
    outcome     str         "ok" | "timeout" | "rolled_back" | "refused"
    duration_s  float       seconds from the request to the outcome
    at          float       unix time of the outcome

kind "switch_totals", name "all" — the switches older than the newest 200, folded in by vllm-switch
(radiance/switch_history.py) so `switch/` stays bounded:
    through        str    the newest switch record folded in; files named up to it are counted here
    counts         {to: {outcome: int}}
    buckets        {outcome: [int]}  switches per SWITCH_BUCKETS slot of duration_s (+Inf last)
    duration_sum   {outcome: float}
    last_at        float | null

kind "ready", name = the stack — written by whoever waited for readiness after a launch
(`radiance probe ready --wait S --stack NAME`, used by the units and vllm-switch; `record_ready`):
    stack     str
    at        float   unix time the ready probe first passed
    waited_s  float   seconds the waiting probe polled
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, ValidationError

from radiance import atomic, paths

SWITCH_OUTCOMES = ("ok", "timeout", "rolled_back", "refused")
MODES = ("eval", "prod")


class _Record(BaseModel):
    # Writers must match the contract exactly; `written_at` is the one key write_state adds.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    written_at: float | None = None


class LaunchRecord(_Record):
    stack: str
    mode: Literal["eval", "prod"]
    phases: dict[str, NonNegativeFloat]
    kernel_builds: NonNegativeInt
    kernel_cache_hits: NonNegativeInt
    cache_key: str
    radiance_version: str
    vllm_version: str
    model: str
    exec_at: float | None = None


class SwitchRecord(_Record):
    from_: str | None = Field(alias="from")
    to: str
    outcome: Literal["ok", "timeout", "rolled_back", "refused"]
    duration_s: NonNegativeFloat
    at: float


# Seconds from a switch request to its outcome (the exporter's histogram; the totals are binned in it).
SWITCH_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)


class SwitchTotals(_Record):
    through: str
    counts: dict[str, dict[str, NonNegativeInt]] = Field(default_factory=dict)
    buckets: dict[str, list[NonNegativeInt]] = Field(default_factory=dict)
    duration_sum: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    last_at: float | None = None


class ReadyRecord(_Record):
    stack: str
    at: float
    waited_s: NonNegativeFloat


SCHEMAS: dict[str, type[_Record]] = {"launch": LaunchRecord, "switch": SwitchRecord, "ready": ReadyRecord,
                                     "switch_totals": SwitchTotals}


class StateError(ValueError):
    """A state record that does not match its schema (names the file and the fields)."""


def _path(kind: str, name: str, root: Path | None = None) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise StateError(f"state name {name!r} (kind {kind!r}) must be a plain file name")
    return (root or paths.state_dir()) / kind / f"{name}.json"


def _check(kind: str, where: str, record: dict[str, Any]) -> None:
    schema = SCHEMAS.get(kind)
    if schema is None:
        return
    try:
        schema.model_validate(record)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or '(record)'}: {err['msg']}" for err in e.errors())
        raise StateError(f"{where}: not a valid {kind!r} record ({problems}); "
                         f"see radiance/radiance/state.py for the fields") from None


def write_state(kind: str, name: str, data: dict[str, Any], root: Path | None = None) -> Path:
    p = _path(kind, name, root)
    record = {"written_at": time.time(), **data}
    _check(kind, f"write_state({kind!r}, {name!r})", record)
    # 0644: the exporter may run as another user than the launcher / vllm-switch that write these
    atomic.write_text(p, json.dumps(record, indent=1, sort_keys=True), mode=0o644)
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


def read_records(kind: str, root: Path | None = None,
                 cache: dict[Path, tuple[tuple[int, int, int], _Record]] | None = None,
                 ) -> tuple[dict[str, _Record], dict[str, str]]:
    """Validated records of a kind, and {file: error} for files that are unreadable or off-schema.

    The exporter uses this: one bad file is reported (a metric and a log line), not fatal. With
    `cache` (kept by the caller across calls) a file is parsed again only when its inode, mtime or size
    changed — switch records pile up one per switch and are never rewritten.
    """
    d = (root or paths.state_dir()) / kind
    good: dict[str, _Record] = {}
    bad: dict[str, str] = {}
    if not d.is_dir():
        return good, bad
    if not os.access(d, os.R_OK | os.X_OK):  # glob would silently list nothing
        bad[str(d)] = "PermissionError: the directory cannot be listed by this user"
        return good, bad
    schema = SCHEMAS[kind]
    files = sorted(d.glob("*.json"))
    if cache is not None:  # forget files that are gone
        present = set(files)
        for gone in [k for k in cache if k.parent == d and k not in present]:
            del cache[gone]
    for p in files:
        try:
            st = p.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # atomic rewrites get a new inode
            if cache is not None and p in cache and cache[p][0] == stamp:
                good[p.stem] = cache[p][1]
                continue
            good[p.stem] = schema.model_validate(json.loads(p.read_text()))
            if cache is not None:
                cache[p] = (stamp, good[p.stem])
        except FileNotFoundError:
            continue  # removed between glob and read
        except (OSError, ValueError, ValidationError) as e:  # unreadable (permissions) or off-schema
            bad[str(p)] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return good, bad


# Writers' helpers: the only place the names and the fields are put together.

def record_launch(stack: str, *, mode: str, phases: dict[str, float], kernel_builds: int, kernel_cache_hits: int,
                  cache_key: str, radiance_version: str, vllm_version: str, model: str,
                  exec_at: float | None = None, root: Path | None = None) -> Path:
    return write_state("launch", stack, {
        "stack": stack, "mode": mode, "phases": phases, "kernel_builds": kernel_builds,
        "kernel_cache_hits": kernel_cache_hits, "cache_key": cache_key, "radiance_version": radiance_version,
        "vllm_version": vllm_version, "model": model, "exec_at": exec_at}, root)


def switch_name(at: float, to: str) -> str:
    """File name of one switch: milliseconds first, so names sort by time."""
    return f"{int(at * 1000):013d}-{to}"


def record_switch(from_stack: str | None, to: str, outcome: str, duration_s: float,
                  at: float | None = None, root: Path | None = None) -> Path:
    at = time.time() if at is None else at
    return write_state("switch", switch_name(at, to), {
        "from": from_stack, "to": to, "outcome": outcome, "duration_s": duration_s, "at": at}, root)


def record_ready(stack: str, waited_s: float, at: float | None = None, root: Path | None = None) -> Path:
    return write_state("ready", stack, {"stack": stack, "at": time.time() if at is None else at,
                                        "waited_s": waited_s}, root)
