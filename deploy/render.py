"""Render systemd units (and Quadlet `.container` files) for every stack of a stack file.

Idempotent: a unit whose text is unchanged is not rewritten, and the result says what changed, so
`radiance setup` can report "nothing to do" and skip `daemon-reload`. Files are written atomically.

A podman stack gets exactly one unit definition, never both: a `.container` in the directory the
Quadlet generator reads (`/etc/containers/systemd/`) where podman supports every key radiance
writes, else a `.service`. Both would define `radiance-<stack>.service`, and the `.service` in
/etc/systemd/system would silently shadow the generated one; the other kind is removed when it
carries our header. Native stacks also get the watchdog template `radiance-watchdog@.service`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

import radiance.units
from radiance import atomic
from radiance.deploy.unitspec import UnitSpec, unit_spec
from radiance.stack import StackFile
from radiance.stack_fields import refuse_control

HEADER_MARK = "Rendered by `radiance render`"
QUADLET_DIR = Path("/etc/containers/systemd")  # the system Quadlet generator's directory
WATCHDOG_TEMPLATE = "radiance-watchdog@.service"
PODMAN_UNITS = ("auto", "quadlet", "service")
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _refuse_control(value: str) -> str:
    try:
        return refuse_control(value, "it would end the systemd unit line it is on")
    except ValueError as e:
        raise ValueError(f"{value!r} {e}") from None


def _quoted(s: str) -> str:
    return s if _PLAIN.match(s) else '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sd_exec(value: object) -> str:
    """One word of an Exec*= command line, or a value of a Quadlet `[Container]` key (Quadlet copies
    it into the generated ExecStart): specifiers (`%`) and variables (`$`) escaped, quoted when needed."""
    return _quoted(_refuse_control(str(value)).replace("%", "%%").replace("$", "$$"))


def sd_value(value: object) -> str:
    """One value of a [Service] assignment (Environment=, LoadCredential=): specifiers escaped, quoted
    when needed. `$` means nothing there (systemd.exec: no variable expansion)."""
    return _quoted(_refuse_control(str(value)).replace("%", "%%"))


def sd_text(value: object) -> str:
    """Free text on one line (comments, Description=): a control character is refused."""
    return _refuse_control(str(value))


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(radiance.units.__file__).parent),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(sd_exec=sd_exec, sd_value=sd_value, sd_text=sd_text)
    return env


def _render(template: str, spec: UnitSpec) -> str:
    text = _env().get_template(template).render(s=spec)
    # Optional blocks leave empty lines behind; a unit keeps blank lines only before a [Section].
    lines = text.splitlines()
    kept = [ln for i, ln in enumerate(lines) if ln or (i + 1 < len(lines) and lines[i + 1].startswith("["))]
    return "\n".join(kept) + "\n"


def render_unit(spec: UnitSpec) -> str:
    return _render(f"service.{spec.runtime}.j2", spec)


def render_quadlet(spec: UnitSpec) -> str:
    if spec.runtime != "podman":
        raise ValueError(f"stack {spec.name!r} is runtime {spec.runtime!r}; Quadlet files are for podman stacks")
    return _render("container.quadlet.j2", spec)


def render_watchdog(spec: UnitSpec) -> str:
    """The `radiance-watchdog@.service` template (values common to every native stack of the file)."""
    return _render("watchdog.native.j2", spec)


def podman_units_for(choice: str) -> str:
    """`quadlet` or `service` for this host: `auto` asks podman for its version."""
    from radiance import podman_cli as podman

    if choice not in PODMAN_UNITS:
        raise ValueError(f"--podman-units {choice!r}: use one of {', '.join(PODMAN_UNITS)}")
    if choice != "auto":
        return choice
    return "quadlet" if podman.has_quadlet(podman.version()) else "service"


@dataclass(frozen=True)
class Rendered:
    path: Path
    changed: bool  # written (new or different); False: identical file already there
    removed: bool = False  # a unit we rendered earlier that must go (stack gone, or the other kind now)


def _put(path: Path, text: str) -> Rendered:
    if path.exists() and path.read_text() == text:
        return Rendered(path, False)
    atomic.write_text(path, text, mode=0o644)
    return Rendered(path, True)


def render_all(sf: StackFile, out: Path, *, mode: str = "prod", launcher_bin: str | None = None,
               podman_bin: str = "/usr/bin/podman", podman_units: str = "service",
               quadlet_dir: Path = QUADLET_DIR, check: bool = False) -> list[Rendered]:
    """Render every stack: `.service` files into `out`, `.container` files into `quadlet_dir`
    (podman_units `quadlet`, or `auto` on a podman that has it). check=True writes nothing."""
    out, quadlet_dir = Path(out), Path(quadlet_dir)
    kind = podman_units_for(podman_units)
    files: list[tuple[Path, str]] = []
    native: UnitSpec | None = None
    make: list[str] = []
    for name in sorted(sf.stacks):
        spec = unit_spec(sf, name, mode=mode, launcher_bin=launcher_bin, podman_bin=podman_bin)
        if spec.sandbox is not None:
            make += spec.sandbox.read_write
        if spec.runtime == "podman" and kind == "quadlet":
            files.append((quadlet_dir / spec.unit.replace(".service", ".container"), render_quadlet(spec)))
        else:
            files.append((out / spec.unit, render_unit(spec)))
        if spec.runtime == "native":
            native = native or spec
    if native is not None:
        files.append((out / WATCHDOG_TEMPLATE, render_watchdog(native)))
    if not check:  # a sandboxed unit cannot create its writable directories outside /var/lib, /var/cache
        for d in make:
            Path(d).mkdir(parents=True, exist_ok=True)
    results: list[Rendered] = []
    for path, text in files:
        if check:
            results.append(Rendered(path, not (path.exists() and path.read_text() == text)))
        else:
            results.append(_put(path, text))
    wanted = {p for p, _ in files}
    for stale in sorted([*out.glob("radiance-*.service"), *quadlet_dir.glob("radiance-*.container")]):
        if stale not in wanted and HEADER_MARK in stale.read_text(errors="ignore"):
            if not check:
                stale.unlink()
            results.append(Rendered(stale, True, removed=True))
    return results
