"""`radiance` CLI: a thin entry that mounts each package's commands."""

from __future__ import annotations

import typer

from radiance import __version__

app = typer.Typer(no_args_is_help=True, help="radiance: quantized LLM serving with vLLM")


@app.callback()
def _root() -> None:
    """radiance: quantized LLM serving with vLLM."""


@app.command()
def version() -> None:
    """Print the radiance version."""
    typer.echo(__version__)


def _mount() -> None:
    # Each package owns its commands in <package>/cli.py and exposes register(app).
    from radiance.deploy import cli as deploy_cli
    from radiance.healthchecks import cli as health_cli
    from radiance.quantize import cli as quantize_cli

    for mod in (quantize_cli, deploy_cli, health_cli):
        mod.register(app)


_mount()
