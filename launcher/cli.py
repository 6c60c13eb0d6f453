"""`radiance-launch STACK [--stacks FILE] [--mode eval|prod] [--dry-run]` (scripts depend on it)."""

from __future__ import annotations

import logging
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from radiance.completion import stack_names
from radiance.kernels.build import KernelBuildError
from radiance.launcher.device import DeviceError
from radiance.launcher.launch import LaunchError, launch
from radiance.launcher.plan import PlanError
from radiance.stack import StackFileError
from radiance.launcher.template import TemplateError

# What a person can fix (input, device, build) is reported in one line, without a traceback.
USER_ERRORS = (StackFileError, PlanError, TemplateError, DeviceError, KernelBuildError, LaunchError)


class Mode(str, Enum):
    eval = "eval"
    prod = "prod"


app = typer.Typer(no_args_is_help=True)


@app.command()
def run(
    stack: Annotated[str, typer.Argument(metavar="STACK", help="stack name in the stack file",
                                         autocompletion=stack_names)],
    stacks: Annotated[Optional[Path], typer.Option(
        "--stacks", help="stack file (default: $RADIANCE_STACKS, else $RADIANCE_HOME/stacks.yaml, else the bundled example)")] = None,
    mode: Annotated[Mode, typer.Option(help="eval: eager, 32K, no drafter, CHECKALL; prod: compiled, full context, drafter")] = Mode.eval,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the vLLM command and environment, then exit 0")] = False,
) -> None:
    """Build kernels, bind the chat template, key the compile cache and serve STACK with vLLM."""
    _log_to_stderr()
    try:
        code = launch(stack, stacks, mode.value, dry_run)
    except USER_ERRORS as e:
        typer.echo(f"radiance-launch: error: {e}", err=True)
        raise typer.Exit(2 if isinstance(e, (StackFileError, PlanError, TemplateError)) else 1) from None
    raise typer.Exit(code)


def _log_to_stderr() -> None:
    # only the launcher's own logger: the root logger belongs to vLLM (imported by the plugin check)
    log = logging.getLogger("radiance.launch")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("radiance-launch: %(message)s"))
        log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False


def main() -> None:
    app()


if __name__ == "__main__":
    main()
