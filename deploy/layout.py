"""Where a host keeps radiance's files, as the rendered units carry it.

Every unit runs with the RADIANCE_HOME (and RADIANCE_CACHE) of whoever rendered it, so a unit, the
operator's `vllm-switch` and the exporter resolve models, state and the switch lock in one place
(before, a unit fell back to root's ~/.cache). The system layout is the FHS one:

    /etc/radiance/stacks.yaml    the stack file (RADIANCE_STACKS)
    /var/lib/radiance            RADIANCE_HOME: models, state          (StateDirectory=radiance)
    /var/cache/radiance          RADIANCE_CACHE: kernel, compile caches (CacheDirectory=radiance)

`radiance render --system` / `radiance setup --system` select it; units rendered for it let systemd
create those directories.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from radiance import paths

SYSTEM_HOME = Path("/var/lib/radiance")
SYSTEM_CACHE = Path("/var/cache/radiance")
SYSTEM_STACKS = Path("/etc/radiance/stacks.yaml")


@dataclass(frozen=True)
class Layout:
    home: Path
    cache: Path

    @property
    def env(self) -> dict[str, str]:
        """What every rendered unit exports (RADIANCE_CACHE only where it differs from the home)."""
        env = {"RADIANCE_HOME": str(self.home)}
        if self.cache != self.home:
            env["RADIANCE_CACHE"] = str(self.cache)
        return env

    @property
    def system(self) -> bool:
        """The system layout: units run vLLM as the `radiance` user (deploy/sandbox.py)."""
        return self.home == SYSTEM_HOME

    @property
    def directories(self) -> list[str]:
        """systemd's *Directory= settings for the parts that are the system layout's."""
        out = []
        if self.home == SYSTEM_HOME:
            out.append("StateDirectory=radiance")
        if self.cache == SYSTEM_CACHE:
            out.append("CacheDirectory=radiance")
        return out


def current() -> Layout:
    return Layout(home=paths.home(), cache=paths.cache_root())


def use_system(environ: MutableMapping[str, str] | None = None) -> None:
    """Point this process at the system layout (what `--system` does before anything is read)."""
    environ = os.environ if environ is None else environ
    environ["RADIANCE_HOME"] = str(SYSTEM_HOME)
    environ["RADIANCE_CACHE"] = str(SYSTEM_CACHE)
    environ.setdefault("RADIANCE_STACKS", str(SYSTEM_STACKS))
