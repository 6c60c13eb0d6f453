"""Commands this package adds to the `radiance` CLI: `fetch-model`, `quantize`, `eval kl`.

Exit codes: 0 done, 1 the work failed (download, checksum, conversion), 2 bad arguments/input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

eval_app = typer.Typer(no_args_is_help=True, help="Quality reports of quantized checkpoints.")


def _fail(msg: str, code: int) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def fetch_model_cmd(
    name: Annotated[str, typer.Argument(help="Model to fetch, e.g. qwen2.5-coder-0.5b")],
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the checkpoint exists.")] = False,
) -> None:
    """Build the bf16 HF checkpoint of NAME under RADIANCE_HOME/models/NAME/bf16 and print its path."""
    from radiance.quantize.fetch import FetchError, fetch_model
    from radiance.quantize.sources import MODELS

    if name not in MODELS:
        _fail(f"unknown model {name!r}; radiance can fetch: {', '.join(sorted(MODELS))}", 2)
    try:
        typer.echo(fetch_model(name, force=force))
    except FetchError as e:
        _fail(str(e), 1)


def quantize_cmd(
    src: Annotated[Path, typer.Argument(help="HF bf16/fp16 checkpoint directory (Llama/Qwen family).")],
    out: Annotated[Path, typer.Argument(help="Output directory (replaced atomically).")],
    format: Annotated[str, typer.Option("--format", help="paroquant (int4 + rotations) or pq2 (ternary).")],
    rotation: Annotated[str, typer.Option("--rotation", help="paroquant rotations: identity or random.")] = "random",
    krot: Annotated[int, typer.Option("--krot", help="paroquant rotation layers, 1..8.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random rotations.")] = 0,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Extra regex of module names left unquantized (repeatable).")] = None,
) -> None:
    """Quantize SRC into OUT as paroquant (asymmetric int4 RTN per 128-group) or pq2 (ternary)."""
    from radiance.kernels.formats import FormatError
    from radiance.quantize.convert import QuantizeError, QuantizeOptions, quantize_checkpoint

    opts = QuantizeOptions(format, rotation, krot, seed, tuple(skip or ()))
    try:
        typer.echo(quantize_checkpoint(src, out, opts))
    except (QuantizeError, FormatError) as e:
        _fail(str(e), 2)


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.command("fetch-model")(fetch_model_cmd)
    app.command("quantize")(quantize_cmd)
