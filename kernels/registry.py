"""Kernel registries: per method and platform, the kernels in priority order.

Each `KernelSpec` names one kernel (what `RADIANCE_DISABLED_KERNELS` takes), the rows it is
meant for (`rows(layer) -> (lo, hi)`), the capability it needs and `can_implement(layer) ->
(ok, reason)`; the method's ops module prepares the shared weight layout and runs a kernel by
its name. At prepare, `choose` cuts the row axis at every spec's edges and gives each piece
to the first spec that can run the layer there and is not disabled: the layer keeps that plan,
logged once per distinct plan, and a call only looks its row count up. A kernel may appear twice
in a list -- preferred on a narrow band high up, a fallback on a wide one further down -- and
disabling its name removes both. Modelled on vLLM's mixed-precision kernel choice.

No torch, no vLLM: the plan is pure data, unit-tested with faked capabilities. The registries
themselves are the methods' (kernels/methods names each platform's); this module imports none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from radiance.kernels import methods

log = logging.getLogger("radiance.kernels")
ROWS_MAX = 1 << 31  # "no upper edge"


@dataclass(frozen=True)
class Target:
    """What a spec judges: one prepared linear on one device."""

    method: str
    platform: str  # "cuda" | "rocm" | "cpu"
    n: int
    k: int
    cap: tuple[int, int] | None = None  # NVIDIA compute capability; None off CUDA
    i8: bool = False  # paroquant W4A8
    interpret: bool = False  # Triton's CPU interpreter: no Gluon, no inline PTX
    decode_max_m: int = 64  # RADIANCE_PQ_DECODE_MAX_M
    exact: bool = False  # only kernels bit-identical to the method's reference order (a test fixture)
    disabled: frozenset[str] = frozenset()  # RADIANCE_DISABLED_KERNELS

    @property
    def sm(self) -> str:
        return f"sm_{self.cap[0]}{self.cap[1]}" if self.cap else self.platform

    @classmethod
    def of(cls, method: str, platform: str, n: int, k: int, config, cap: tuple[int, int] | None = None,
           i8: bool = False, exact: bool = False) -> Target:
        """The target of a layer prepared under `config` (kernels/config.KernelConfig)."""
        return cls(method, platform, n, k, cap, i8, config.interpret, config.decode_max_m, exact, config.disabled)


Check = Callable[[Target], "str | None"]  # None: can run; else the reason it cannot


@dataclass(frozen=True)
class KernelSpec:
    name: str  # "<method>.<kernel>", unique per kernel
    platform: str
    rows: Callable[[Target], tuple[int, int]]  # the M band it is chosen for (inclusive; lo > hi: none)
    min_cap: tuple[int, int] | None = None
    check: Check | None = None
    exact: bool = False  # bit-identical to the method's reference kernel order

    @property
    def kernel(self) -> str:
        return self.name.split(".", 1)[1]

    def can_implement(self, t: Target) -> tuple[bool, str]:
        if t.platform != self.platform:
            return False, f"runs on {self.platform}, not {t.platform}"
        if self.min_cap is not None and (t.cap or (0, 0)) < self.min_cap:
            return False, f"needs sm_{self.min_cap[0]}{self.min_cap[1]}+, this is {t.sm}"
        if t.exact and not self.exact:
            return False, "not bit-identical to the reference order (exact kernels asked)"
        if self.name in t.disabled:
            return False, "disabled by RADIANCE_DISABLED_KERNELS"
        reason = self.check(t) if self.check else None
        return (False, reason) if reason else (True, "")


@dataclass
class Plan:
    """Rows lo..hi -> the spec that runs them, ascending and covering 1..ROWS_MAX."""

    pieces: list[tuple[int, int, KernelSpec]] = field(default_factory=list)

    def spec(self, m: int) -> KernelSpec:
        for lo, hi, spec in self.pieces:
            if lo <= m <= hi:
                return spec
        raise ValueError(f"radiance: no kernel planned for M={m} rows (the plan: {self.describe()})")

    def covers(self, m: int) -> bool:
        return any(lo <= m <= hi for lo, hi, _ in self.pieces)

    def describe(self) -> str:
        return ", ".join(f"M={lo}{'+' if hi >= ROWS_MAX else '' if hi == lo else f'..{hi}'} {s.name}"
                         for lo, hi, s in self.pieces)


def known() -> set[str]:
    """Every kernel name of every method on every platform (each registry the MethodSpecs name is
    imported: importing one registers its names)."""
    for spec in methods.METHODS.values():
        for entry in spec.platforms.values():
            if entry.kernels:
                methods.resolve(entry.kernels)
    return set(ALL)


def check_disabled(names: frozenset[str]) -> None:
    """RADIANCE_DISABLED_KERNELS names only kernels some registry has (a name of a registry not
    imported yet is still a name)."""
    if not names - set(ALL):
        return
    unknown = names - known()
    if unknown:
        raise ValueError(f"RADIANCE_DISABLED_KERNELS names {', '.join(sorted(unknown))}, which no registry has; "
                         f"kernels: {', '.join(sorted(ALL))}")


ALL: dict[str, None] = {}  # every registered kernel name (for the knob's check and the docs)


def register(specs: list[KernelSpec]) -> list[KernelSpec]:
    for s in specs:
        ALL.setdefault(s.name, None)
    return specs


_LOGGED: set[tuple[str, str, str]] = set()


def choose(specs: list[KernelSpec], t: Target, only: str | None = None) -> Plan:
    """The plan for this layer: each piece of the row axis to the first spec that can run it.
    `only`: that kernel on every row it can take (benchmarks and tests force a path this way)."""
    check_disabled(t.disabled)
    if only is not None and only not in {s.name for s in specs}:
        raise ValueError(f"radiance: no kernel {only!r} for {t.method} on {t.platform}; "
                         f"it has {', '.join(dict.fromkeys(s.name for s in specs))}")
    usable, reasons = [], []
    for s in specs:
        ok, why = s.can_implement(t)
        if ok and only in (None, s.name):
            usable.append((s, *s.rows(t)))
        elif not ok:
            reasons.append(f"{s.name}: {why}")
    edges = sorted({1, *(lo for _, lo, hi in usable if lo <= hi), *(hi + 1 for _, lo, hi in usable if lo <= hi)})
    pieces: list[tuple[int, int, KernelSpec]] = []
    for lo, nxt in zip(edges, edges[1:] + [ROWS_MAX + 1]):
        hi = min(nxt - 1, ROWS_MAX)
        if lo > ROWS_MAX:
            break
        spec = next((s for s, a, b in usable if a <= lo and hi <= b), None)
        if spec is None:
            if only is not None:
                continue  # a forced kernel plans only the rows it takes
            raise NotImplementedError(
                f"radiance: no kernel for {t.method} on {t.sm} at M={lo}..{hi} (N={t.n}, K={t.k}); "
                f"unusable: {'; '.join(reasons) or 'none registered'}")
        if pieces and pieces[-1][2].name == spec.name and pieces[-1][1] == lo - 1:
            pieces[-1] = (pieces[-1][0], hi, spec)
        else:
            pieces.append((lo, hi, spec))
    if not pieces:
        raise NotImplementedError(f"radiance: {only} cannot run {t.method} N={t.n} K={t.k} on {t.sm}: "
                                  f"{'; '.join(reasons)}")
    plan = Plan(pieces)
    key = (t.method, t.sm, plan.describe())
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.info("radiance kernels: %s on %s (N=%d, K=%d): %s", t.method, t.sm, t.n, t.k, plan.describe())
    return plan
