"""`vllm-switch`: switch the host to one stack, show what runs, list stacks, stop.

    vllm-switch NAME [--dry-run] [--no-wait] [--timeout S] [--no-rollback] [--lock-wait S]
                     [--drain-timeout S] [--force]
    vllm-switch status | list | stop [NAME...] [--drain-timeout S] [--force]

Exit codes: 0 ok, 1 failed or timed out (rolled back or not), 2 bad input, 3 another vllm-switch
holds the lock, 4 refused before anything was stopped (the target cannot start, a process that is
not a radiance stack holds the port, requests still running after --drain-timeout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional


import typer
from typer.core import TyperGroup

from radiance.completion import stack_names
from radiance.deploy.inflight import DRAIN_TIMEOUT_S
from radiance.stack import StackFile, StackFileError, load_stacks

RESERVED = ("status", "list", "stop", "to")


class _SwitchGroup(TyperGroup):
    """`vllm-switch NAME` means `vllm-switch to NAME` unless NAME is a subcommand."""

    def resolve_command(self, ctx, args: list[str]):
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["to", *args]
        return super().resolve_command(ctx, args)

    def shell_complete(self, ctx, incomplete: str):
        """The first word: the subcommands and every stack name (`vllm-switch NAME`)."""
        items = super().shell_complete(ctx, incomplete)
        # click's CompletionItem, whichever click this typer brings (its own copy, or the package)
        item = type(super().shell_complete(ctx, "")[0])
        return [*items, *(item(n) for n in stack_names(ctx, incomplete) if n not in RESERVED)]


app = typer.Typer(cls=_SwitchGroup, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Switch this host's GPUs and port to one radiance stack, and wait until it answers.")

StacksOpt = Annotated[Optional[Path], typer.Option("--stacks", help="stack file (default: RADIANCE_STACKS, "
                                                   "$RADIANCE_HOME/stacks.yaml, the bundled example)")]
LockWaitOpt = Annotated[float, typer.Option("--lock-wait", help="seconds to queue behind another vllm-switch "
                                            "(default 0: fail at once with who holds the lock)")]
DrainOpt = Annotated[float, typer.Option("--drain-timeout", min=0, help="seconds to wait for the requests of the "
                                         "stacks being stopped to finish; refused (nothing stopped) after")]
ForceOpt = Annotated[bool, typer.Option("--force", help="stop without waiting for running requests (they fail)")]


def _load(stacks: Path | None) -> StackFile:
    try:
        sf = load_stacks(stacks)
    except StackFileError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    clash = sorted(set(sf.stacks) & set(RESERVED))
    if clash:
        typer.echo(f"{sf.path}: stack name(s) {clash} collide with vllm-switch subcommands; rename them", err=True)
        raise typer.Exit(2)
    return sf


def _echo(msg: str) -> None:
    typer.echo(msg, err=False)


@app.command("to", hidden=True)
def switch_to(
    name: Annotated[str, typer.Argument(help="stack to switch to", autocompletion=stack_names)],
    stacks: StacksOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="return once started, without waiting for readiness")] = False,
    timeout: Annotated[Optional[float], typer.Option(help="seconds to wait for readiness (default: the stack's "
                                                     "start timeout)")] = None,
    no_rollback: Annotated[bool, typer.Option("--no-rollback", help="on failure, do not restart the previous stack")] = False,
    lock_wait: LockWaitOpt = 0.0,
    drain_timeout: DrainOpt = DRAIN_TIMEOUT_S,
    force: ForceOpt = False,
) -> None:
    """Stop what conflicts with NAME, wait until it is gone, start NAME, wait until it answers."""
    from radiance.deploy import plan
    from radiance.deploy.switch import Switch, SwitchBusy

    sf = _load(stacks)
    try:
        sf.get(name)
    except StackFileError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    if dry_run:
        typer.echo(plan.describe_switch(sf, name, wait=not no_wait, rollback=not no_rollback, force=force,
                                        drain_timeout=drain_timeout))
        return
    sw = Switch(sf, timeout=timeout, wait=not no_wait, rollback=not no_rollback, lock_wait=lock_wait, echo=_echo,
                force=force, drain_timeout=drain_timeout)
    try:
        out = sw.run(name)
    except SwitchBusy as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(3) from None
    typer.echo(f"{out.outcome}: {out.message}", err=out.exit_code != 0)
    raise typer.Exit(out.exit_code)


@app.command("status")
def status(stacks: StacksOpt = None, probe_timeout: Annotated[float, typer.Option(help="seconds per ready probe")] = 10.0) -> None:
    """Which stack is active, since when, whether it answers, its port and GPUs (read live)."""
    from radiance.deploy import plan

    typer.echo(plan.status_table(_load(stacks), probe_timeout))


@app.command("list")
def list_(stacks: StacksOpt = None) -> None:
    """Every stack in the stack file with its runtime, port, GPUs, conflicts and unit state."""
    from radiance.deploy import plan

    typer.echo(plan.list_table(_load(stacks)))


@app.command("stop")
def stop(names: Annotated[Optional[list[str]], typer.Argument(help="stacks to stop (default: all running)",
                                                               autocompletion=stack_names)] = None,
         stacks: StacksOpt = None, lock_wait: LockWaitOpt = 0.0, drain_timeout: DrainOpt = DRAIN_TIMEOUT_S,
         force: ForceOpt = False) -> None:
    """Stop running radiance stacks (after their running requests) and wait until their containers,
    ports and GPU memory are free. Nothing starts at boot after `vllm-switch stop`."""
    from radiance.deploy.switch import StillBusy, SwitchBusy, stop_all

    sf = _load(stacks)
    for n in names or []:
        try:
            sf.get(n)
        except StackFileError as e:
            typer.echo(str(e), err=True)
            raise typer.Exit(2) from None
    try:
        held = stop_all(sf, names, echo=_echo, lock_wait=lock_wait, force=force, drain_timeout=drain_timeout)
    except SwitchBusy as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(3) from None
    except StillBusy as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(4) from None
    if held:
        typer.echo("still held after stopping: " + "; ".join(held), err=True)
        raise typer.Exit(1)
    typer.echo("stopped")


def main() -> None:
    from radiance.hostcmd import HostCommandError, HostCommandTimeout
    from radiance.deploy.systemd import SystemdError

    try:
        app()
    except HostCommandTimeout as e:
        typer.echo(f"vllm-switch: {e}", err=True)
        raise SystemExit(1) from None
    except SystemdError as e:
        typer.echo(f"vllm-switch needs systemd as PID 1 and the rendered units installed: {e}", err=True)
        raise SystemExit(2) from None
    except HostCommandError as e:
        typer.echo(f"vllm-switch: {e}", err=True)
        raise SystemExit(1) from None
