"""One `Tile` for every NVIDIA kernel kind, each card's shared-memory limit, and the cards' tuned
tiles: kernels/tiles/<arch>.json, per method a list of entries {"kernel", "rows" (the method's tile
class of row counts), optionally "n" and "k" (else every shape), "tile": its fields}, written by
the tuners (bench/bench_pq2.py --sweep --write-tiles for pq2) or by hand from a measured run. A
card without a file, or a shape without an entry, takes the kind's heuristic."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

TILES = Path(__file__).resolve().parents[1] / "tiles"
SMEM_LIMIT = {(7, 5): 64 * 1024, (8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 9): 99 * 1024, (9, 0): 227 * 1024}


@dataclass(frozen=True)
class Tile:
    bm: int = 16  # token rows per program
    bn: int = 64  # output columns (weight rows) per program
    warps: int = 4
    stages: int = 3  # pipeline stages (pq2's gluon: 1 = the next step in registers, else a cp.async ring)
    split: int = 1  # K split; with `persist`, the most programs sharing one output tile
    kind: str = ""  # the kernel kind that runs it
    gpi: int = 1  # K groups per loop step (paroquant gemv / gemv_gl, pq2's dp4a and gluon)
    maxnreg: int = 0  # register cap per thread, 0 = the compiler's choice
    persist: int = 0  # a stream-K grid of this many programs per SM (0: tiles x split)
    mr: int = 1  # pq2 dp4a: token rows per program
    rr: int = 1  # pq2 dp4a: the bn rows as rr sub-tiles that share each activation load
    one_dot: bool = False  # pq2 planes: one K=128 dot per group instead of four K=32 ones
    bk: int = 128  # dense skinny: K per loop step
    ksplit: int = 256  # dense skinny: K per program (the split follows from K)


def smem_limit(cap: tuple[int, int]) -> int:
    """Shared memory one block may opt into on a card of this capability."""
    if cap in SMEM_LIMIT:
        return SMEM_LIMIT[cap]
    return SMEM_LIMIT[(9, 0)] if cap >= (9, 0) else SMEM_LIMIT[(8, 6)] if cap >= (8, 0) else SMEM_LIMIT[(7, 5)]


def fit(t: Tile, limit: int, smem: Callable[[Tile, int], int], act_bytes: int = 2, min_bn: int = 64,
        what: str = "paroquant") -> Tile:
    """Halve stages (to 2), then BM (to 16), then BN (to min_bn) until the tile fits `limit` bytes
    by its kind's `smem(tile, act_bytes)`."""
    while smem(t, act_bytes) > limit:
        if t.stages > 2:
            t = replace(t, stages=t.stages - 1)
        elif t.bm > 16:
            t = replace(t, bm=t.bm // 2)
        elif t.bn > min_bn:
            t = replace(t, bn=t.bn // 2, warps=max(4, t.warps // 2))
        else:
            raise ValueError(f"{what}: no GEMM tile fits {limit} bytes of shared memory")
    return t


def arch(cap: tuple[int, int] | None) -> str:
    return f"sm_{cap[0]}{cap[1]}" if cap else ""


@functools.cache
def tuned(card: str, method: str) -> dict[tuple[str, int | None, int | None, str], Tile]:
    """A card's tuned tiles of one method, (kernel, n, k, rows) -> Tile (n, k None: every shape), from
    tiles/<card>.json; none for a card without a file."""
    path = TILES / f"{card}.json"
    if not card or not path.is_file():
        return {}
    known = {f.name for f in fields(Tile)}
    out = {}
    for e in json.loads(path.read_text()).get(method, []):
        bad = set(e["tile"]) - known
        if bad or set(e) - {"kernel", "n", "k", "rows", "tile"}:
            raise ValueError(f"{path}: {method} entry {e} has unknown fields {sorted(bad)} (a Tile has {sorted(known)})")
        out[(e["kernel"], e.get("n"), e.get("k"), e["rows"])] = Tile(**e["tile"])
    return out


def lookup(card: str, method: str, kernel: str, n: int, k: int, rows: str) -> Tile | None:
    """The card's tuned tile for this shape, else for every shape, else None (the heuristic's)."""
    table = tuned(card, method)
    return table.get((kernel, n, k, rows)) or table.get((kernel, None, None, rows))


def write_tuned(path: Path, method: str, winners: dict[tuple[str, int, int, str], Tile], written_by: str) -> None:
    """A tuner's output: the method's entries of the card's file replaced, one per line, only a
    tile's non-default fields beside bn; the other methods' entries kept."""
    old = json.loads(path.read_text()) if path.is_file() else {}
    base = asdict(Tile())
    sections = {m: [json.dumps(e) for e in entries] for m, entries in old.items() if m not in ("card", "written_by")}
    sections[method] = [json.dumps({"kernel": kern, **({"n": n, "k": k} if n is not None else {}), "rows": cls,
                                    "tile": {f: v for f, v in asdict(t).items() if f == "bn" or v != base[f]}})
                        for (kern, n, k, cls), t in sorted(winners.items(), key=lambda e: (e[0][0], e[0][1] or 0,
                                                                                         e[0][2] or 0, e[0][3]))]
    body = ",\n".join(f' "{m}": [\n  ' + ",\n  ".join(lines) + "\n]" for m, lines in sorted(sections.items()))
    path.write_text(f'{{"card": "{path.stem}", "written_by": "{old.get("written_by", written_by)}",\n{body}}}\n')
