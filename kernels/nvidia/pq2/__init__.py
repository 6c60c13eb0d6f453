"""pq2 on NVIDIA, one module per kernel kind (docs/nvidia.md has the band -> kernel table): `dp4a`
(the DP4A GEMV: M = 1, and every row below sm_80), `gluon` (int8 mma.sync in Gluon: M =
2..GLUON_MAX_M), `planes` (the masked-plane int8 tl.dot kernel: the rest on sm_80+), on sm_90
`gluon_ws` and `gluon_wgmma` (async int8 wgmma in Gluon; warp-specialized / not) for the prefill
bands, and `legacy` (the simplest correct kernel). Each owns its rows and checks (its registry
entries), its heuristic tile and its launch; `KERNELS` is their priority order (kernels/registry.py
plans a layer's rows from it at prepare, pq2_ops.prepare). A kind's tile for a shape on a card is
the tuner's measured winner from tiles/<arch>.json (bench/bench_pq2.py --sweep --write-tiles), else
its heuristic. Bit-identical to legacy (the `exact` test fixture takes only these, without split-K):
planes, gluon_ws, gluon_wgmma. Pure Python (unit-tested on CPU); pq2_ops executes what this decides.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from radiance.kernels.nvidia import tile as tiles
from radiance.kernels.nvidia.pq2 import dp4a, gluon, gluon_wgmma, gluon_ws, legacy, planes
from radiance.kernels.nvidia.pq2.common import SMALL_MAX_M, Pq2ConfigError
from radiance.kernels.nvidia.pq2.gluon import GLUON_MAX_M  # noqa: F401 -- the tests' and docs' names
from radiance.kernels.nvidia.pq2.gluon_wgmma import WGMMA_MIN_M, WGMMA_MIN_N  # noqa: F401
from radiance.kernels.nvidia.pq2.gluon_ws import WS_MAX_M  # noqa: F401
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import register

KINDS = {k.NAME: k for k in (dp4a, gluon, gluon_ws, gluon_wgmma, planes, legacy)}
# Priority order. Int8 tensor-core dots need sm_80+ (Triton has none on sm_75): there the DP4A
# GEMV runs every row (its last entry).
KERNELS = register([dp4a.M1, gluon.SPEC, gluon_ws.SPEC, gluon_wgmma.SPEC, planes.SPEC, legacy.SPEC, dp4a.EVERY_ROW])
# the kinds whose GEMM launches dependent on the quantizer where the GPU can (kernels/pdl.py, sm_90+)
PDL_PATHS = tuple(name for name, k in KINDS.items() if k.DEPENDENT)
TILE_CLASSES = ("m1", "small", "mid", "large")


def tile_class(m: int) -> str:
    """Tile classes (finer than the bands): m1, small (2..16), mid (17..64), large (> 64)."""
    return "m1" if m == 1 else "small" if m <= SMALL_MAX_M else "mid" if m <= 64 else "large"


def tuned(card: str) -> dict[tuple[str, int, int, str], Tile]:
    """The tuner's winners for a card, (kernel, n, k, tile class) -> Tile (kernels/nvidia/tile.py)."""
    return tiles.tuned(card, "pq2")


def write_tiles(path: Path, winners: dict[tuple[str, int, int, str], Tile]) -> None:
    """The tuner's output (the card's other methods' entries kept)."""
    tiles.write_tuned(path, "pq2", winners, "bench/bench_pq2.py --sweep --write-tiles")


def tile_for(path: str, n: int, k: int, m: int, sms: int, split_k: bool, family: str = "") -> Tile:
    """Tile configuration for a path on a shape: the measured table entry, else the heuristic."""
    if k % 128:
        raise ValueError(f"pq2 K={k} is not a multiple of the 128-group")
    kind = KINDS.get(path)
    if kind is None:
        raise Pq2ConfigError(f"unknown pq2 path {path!r}")
    t = tiles.lookup(family, "pq2", path, n, k, tile_class(m)) or kind.tile(n, k, m, sms, family)
    return t if split_k else replace(t, split=1)
