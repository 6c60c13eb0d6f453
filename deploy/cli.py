"""`radiance render` and `radiance setup` (thin: the work is in render.py and setup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from radiance.stack import StackFileError, load_stacks

StacksOpt = Annotated[Optional[Path], typer.Option("--stacks", help="stack file (default: RADIANCE_STACKS, "
                                                   "$RADIANCE_HOME/stacks.yaml, the bundled example)")]


def render(
    out: Annotated[Path, typer.Option("--out", help="directory for the .service files (e.g. /etc/systemd/system)")],
    stacks: StacksOpt = None,
    mode: Annotated[str, typer.Option(help="launcher mode the units run: prod or eval")] = "prod",
    launcher: Annotated[Optional[str], typer.Option(help="absolute path of radiance-launch for native stacks "
                                                    "(`radiance` beside it runs the probes)")] = None,
    podman: Annotated[str, typer.Option(help="absolute path of podman for podman stacks")] = "/usr/bin/podman",
    podman_units: Annotated[str, typer.Option("--podman-units", help="podman stacks as `quadlet` (.container in "
                                              "--quadlet-dir), `service`, or `auto` (quadlet on podman >= 5.0)")] = "auto",
    quadlet_dir: Annotated[Path, typer.Option("--quadlet-dir", help="where Quadlet reads .container files")] = Path(
        "/etc/containers/systemd"),
    system: Annotated[bool, typer.Option("--system", help="system layout: RADIANCE_HOME=/var/lib/radiance, "
                                         "RADIANCE_CACHE=/var/cache/radiance, /etc/radiance/stacks.yaml")] = False,
) -> None:
    """Render a systemd unit per stack (Conflicts= from shared GPUs/ports); unchanged files are left alone."""
    from radiance.deploy import layout
    from radiance.deploy.render import PODMAN_UNITS, render_all

    if system:
        layout.use_system()
    try:
        sf = load_stacks(stacks)
    except StackFileError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    if mode not in ("prod", "eval"):
        typer.echo(f"--mode {mode!r}: allowed values are prod, eval", err=True)
        raise typer.Exit(2)
    if podman_units not in PODMAN_UNITS:
        typer.echo(f"--podman-units {podman_units!r}: allowed values are {', '.join(PODMAN_UNITS)}", err=True)
        raise typer.Exit(2)
    try:
        results = render_all(sf, out, mode=mode, launcher_bin=launcher, podman_bin=podman, podman_units=podman_units,
                             quadlet_dir=quadlet_dir)
    except ValueError as e:  # a unit that could not run as rendered; nothing was written
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    for r in results:
        typer.echo(f"{'removed' if r.removed else 'wrote' if r.changed else 'unchanged'}  {r.path}")
    if not any(r.changed for r in results):
        typer.echo("nothing changed")


def stack_schema() -> None:
    """Print the stack file's JSON Schema (for editors: `# yaml-language-server: $schema=FILE`)."""
    from radiance.stack_schema import text

    typer.echo(text(), nl=False)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.command("render")(render)
    app.command("stack-schema")(stack_schema)
    from radiance.deploy.setup_cli import setup

    app.command("setup")(setup)
