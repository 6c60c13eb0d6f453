"""Render systemd units (and Quadlet `.container` files) for every stack of a stack file.

Idempotent: a unit whose text is unchanged is not rewritten, and the result says what changed, so
`radiance setup` can report "nothing to do" and skip `daemon-reload`. Files are written atomically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

import radiance.units
from radiance import atomic
from radiance.deploy.unitspec import UnitSpec, unit_spec
from radiance.launcher.stack import StackFile

HEADER_MARK = "Rendered by `radiance render`"
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def sd_arg(value: object) -> str:
    """One word of a systemd command line / assignment: `%` and `$` escaped, quoted when needed."""
    s = str(value).replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(s):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(radiance.units.__file__).parent),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters["sd_arg"] = sd_arg
    return env


def render_unit(spec: UnitSpec) -> str:
    return _env().get_template(f"service.{spec.runtime}.j2").render(s=spec)


def render_quadlet(spec: UnitSpec) -> str:
    if spec.runtime != "podman":
        raise ValueError(f"stack {spec.name!r} is runtime {spec.runtime!r}; Quadlet files are for podman stacks")
    return _env().get_template("container.quadlet.j2").render(s=spec)


@dataclass(frozen=True)
class Rendered:
    path: Path
    changed: bool  # written (new or different); False: identical file already there
    removed: bool = False  # a unit we rendered earlier for a stack no longer in the file


def _put(path: Path, text: str) -> Rendered:
    if path.exists() and path.read_text() == text:
        return Rendered(path, False)
    atomic.write_text(path, text)
    return Rendered(path, True)


def render_all(sf: StackFile, out: Path, *, mode: str = "prod", launcher_bin: str | None = None,
               podman_bin: str = "/usr/bin/podman", quadlet: bool = True, check: bool = False) -> list[Rendered]:
    """Render every stack into `out` (`.service`) and `out/quadlet/` (`.container`).

    check=True computes what would change without writing anything.
    """
    out = Path(out)
    results: list[Rendered] = []
    wanted: set[Path] = set()
    for name in sorted(sf.stacks):
        spec = unit_spec(sf, name, mode=mode, launcher_bin=launcher_bin, podman_bin=podman_bin)
        files = [(out / spec.unit, render_unit(spec))]
        if quadlet and spec.runtime == "podman":
            files.append((out / "quadlet" / spec.unit.replace(".service", ".container"), render_quadlet(spec)))
        for path, text in files:
            wanted.add(path)
            if check:
                results.append(Rendered(path, not (path.exists() and path.read_text() == text)))
            else:
                results.append(_put(path, text))
    for stale in sorted([*out.glob("radiance-*.service"), *out.glob("quadlet/radiance-*.container")]):
        if stale not in wanted and HEADER_MARK in stale.read_text(errors="ignore"):
            if not check:
                stale.unlink()
            results.append(Rendered(stale, True, removed=True))
    return results
