"""`radiance setup [--check] [--record]`: thin CLI over deploy/setup.py, with rich progress for long steps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from radiance.stack import StackFileError, load_stacks

_STYLE = {"ok": "green", "changed": "yellow", "missing": "red", "skipped": "dim"}


def setup(
    stacks: Annotated[Optional[Path], typer.Option("--stacks", help="stack file (default: RADIANCE_STACKS, "
                                                   "$RADIANCE_HOME/stacks.yaml, the bundled example)")] = None,
    stack: Annotated[Optional[list[str]], typer.Option("--stack", help="only these stacks (repeat; default all)")] = None,
    check: Annotated[bool, typer.Option("--check", help="report what is missing or would change; change nothing")] = False,
    unit_dir: Annotated[Path, typer.Option(help="where units are installed")] = Path("/etc/systemd/system"),
    quadlet_dir: Annotated[Path, typer.Option(help="where Quadlet .container files are installed (podman >= 5.0)")] = Path(
        "/etc/containers/systemd"),
    skip_images: Annotated[bool, typer.Option("--skip-images", help="do not build images")] = False,
    record: Annotated[bool, typer.Option("--record", help="write SHA256SUMS into checkpoints that have none (a "
                                         "downloaded one), so later runs verify their bytes")] = False,
    system: Annotated[bool, typer.Option("--system", help="system layout: RADIANCE_HOME=/var/lib/radiance, "
                                         "RADIANCE_CACHE=/var/cache/radiance, /etc/radiance/stacks.yaml")] = False,
) -> None:
    """Host check, images, checkpoints (placed from `source`, structure, sha256), kernels, units + daemon-reload. Idempotent."""
    from radiance.deploy import layout
    from radiance.deploy import setup as steps_mod

    if system:
        layout.use_system()

    console = Console(stderr=True)
    try:
        sf = load_stacks(stacks)
        names = sorted(stack) if stack else sorted(sf.stacks)
        for n in names:
            sf.get(n)
    except StackFileError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None

    say = (lambda m: console.log(m))
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done)

        results += steps_mod.host_check(sf, names)
        if not skip_images:
            results += steps_mod.images(sf, names, check, say)
        results += steps_mod.checkpoints(sf, names, check, progress, record)
        results += steps_mod.kernels(sf, names, check, say)
        results += steps_mod.service_user(sf, names, check)
        results += steps_mod.units(sf, unit_dir, check, quadlet_dir)

    table = Table(title=f"radiance setup{' --check' if check else ''} ({sf.path})", show_lines=False)
    for col in ("step", "status", "detail"):
        table.add_column(col, overflow="fold")
    for s in results:
        table.add_row(s.name, f"[{_STYLE[s.status]}]{s.status}[/]", s.detail)
    Console(width=200).print(table)
    changed = [s for s in results if s.status == "changed"]
    missing = [s for s in results if s.status == "missing"]
    if check:
        typer.echo(f"check only: nothing was changed; {len(missing)} item(s) missing or out of date")
    elif not changed:
        typer.echo("nothing changed: this host was already set up")
    else:
        typer.echo(f"{len(changed)} step(s) changed this host")
    raise typer.Exit(1 if missing else 0)
