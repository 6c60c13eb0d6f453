"""What the pq2 kinds share: the config error, the small band, the split rule of the heuristic
tiles, the Gluon checks and the split-K reduce."""

from __future__ import annotations

import triton

from radiance.kernels.launch import Launch
from radiance.kernels.registry import Target
from radiance.kernels.triton.pq2_common import reduce_splits

SMALL_MAX_M = 16  # the decode kernels' rows (tile class `small` up to here)
REDUCE_BLOCK = 1024


class Pq2ConfigError(ValueError):
    """A tile or launch a pq2 kernel cannot take."""


def gluon(t: Target) -> str | None:
    return "Gluon: not under the Triton interpreter" if t.interpret else None


def sm90(t: Target) -> str | None:
    return "wgmma is sm_90 only" if (t.cap or (0, 0))[0] != 9 else gluon(t)


def splits_for(programs: int, steps: int, sms: int, min_steps: int, cap: int = 16) -> int:
    """Split K until the grid holds ~2 waves, keeping >= min_steps loop steps per split."""
    s = 1
    while programs * s < 2 * sms and s * 2 <= cap and steps // (s * 2) >= min_steps:
        s *= 2
    return s


def reduce(layer, p, y, splits: int) -> None:
    """y = the sum of the split-K partials p [splits, M, N] (fp32), in split order."""
    mn = y.numel()
    launch = layer.plan(("reduce", splits, y.dtype),
                        lambda: Launch(reduce_splits, {"SPLITS": splits, "BLOCK": REDUCE_BLOCK}, 4, 1))
    launch((triton.cdiv(mn, REDUCE_BLOCK),), p, y, mn)
