"""vllm-switch's records, bounded: the newest KEEP as one file each, the older ones folded into totals.

Every switch writes `state/switch/<ms>-<to>.json` (radiance/state.py); a host switching a few times
an hour would pile up files for ever, and the exporter reads them all. `record` writes the switch
and then folds all but the newest KEEP into `state/switch_totals/all.json`: counts by target and
outcome, the durations binned into the exporter's histogram buckets, the latest time, and `through`,
the newest record folded in. Files named up to `through` are counted there and no longer read, so a
fold killed between writing the totals and deleting the files counts nothing twice: the next fold
deletes them. The exporter's counters stay monotonic across folds and its own restarts.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from filelock import FileLock

from radiance import paths, state
from radiance.state import SWITCH_BUCKETS as BUCKETS
from radiance.state import SwitchTotals

KEEP = 200
KIND, NAME = "switch_totals", "all"


def slot(duration_s: float) -> int:
    """The BUCKETS slot of a duration (len(BUCKETS): above the last bound)."""
    return bisect.bisect_left(BUCKETS, duration_s)


def _root(root: Path | None) -> Path:
    return root or paths.state_dir()


def _totals(root: Path) -> SwitchTotals | None:
    raw = state.read_state(KIND, NAME, root)
    return SwitchTotals.model_validate(raw) if raw is not None else None


def fold(root: Path | None = None) -> SwitchTotals | None:
    """Fold all but the newest KEEP switch records into the totals and delete their files."""
    root = _root(root)
    d = root / "switch"
    if not d.is_dir():
        return None
    with FileLock(str(d / ".fold.lock")):
        totals = _totals(root)
        through = totals.through if totals else ""
        files = sorted(d.glob("*.json"))
        pending = [p for p in files if p.stem > through]
        if len(pending) > KEEP:
            t = totals or SwitchTotals(through="")
            for p in pending[:-KEEP]:
                rec = state.SwitchRecord.model_validate_json(p.read_text())
                by_to = t.counts.setdefault(rec.to, {})
                by_to[rec.outcome] = by_to.get(rec.outcome, 0) + 1
                t.buckets.setdefault(rec.outcome, [0] * (len(BUCKETS) + 1))[slot(rec.duration_s)] += 1
                t.duration_sum[rec.outcome] = t.duration_sum.get(rec.outcome, 0.0) + rec.duration_s
                t.last_at = max(t.last_at or rec.at, rec.at)
                t.through = p.stem
            state.write_state(KIND, NAME, t.model_dump(exclude={"written_at"}), root)
            totals, through = t, t.through
        for p in files:
            if p.stem <= through:
                p.unlink(missing_ok=True)
    return totals


def record(from_stack: str | None, to: str, outcome: str, duration_s: float, at: float | None = None,
           root: Path | None = None) -> Path:
    """Write one switch record (state.record_switch) and keep the directory bounded."""
    p = state.record_switch(from_stack, to, outcome, duration_s, at=at, root=root)
    fold(root)
    return p


def unfolded(records: dict[str, state.SwitchRecord], totals: SwitchTotals | None) -> list[state.SwitchRecord]:
    """The records the totals do not count yet (a fold may have been killed before deleting its files)."""
    through = totals.through if totals else ""
    return [r for name, r in sorted(records.items()) if name > through]
