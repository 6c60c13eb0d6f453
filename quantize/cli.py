"""Commands this package adds to the `radiance` CLI: `fetch-model`, `quantize`, `import-gguf`, `eval kl`.

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
    format: Annotated[str, typer.Option("--format", help="paroquant (int4 + rotations), paroquant_mxfp4 (MXFP4 + rotations) or pq2 (ternary).")],
    rotation: Annotated[str, typer.Option("--rotation", help="paroquant rotations: identity, random or learned (ParoQuant's optimizer).")] = "random",
    krot: Annotated[int, typer.Option("--krot", help="paroquant rotation layers, 1..8.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random rotations.")] = 0,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Extra regex of module names left unquantized (repeatable).")] = None,
    device: Annotated[str, typer.Option("--device", help="Where the math runs: cpu or cuda (same codes up to float rounding order).")] = "cpu",
    calib: Annotated[Path | None, typer.Option("--calib", help="learned: UTF-8 calibration text (default: the shipped corpus).")] = None,
    samples: Annotated[int | None, typer.Option("--samples", help="learned: calibration windows (default 128).")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="learned: tokens per window (default 512).")] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", help="learned: epochs of each of the two stages (default 10).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="learned: continue after the last layer a killed run finished.")] = False,
    rotations_from: Annotated[Path | None, typer.Option("--rotations-from", help="paroquant_mxfp4: copy the rotations of this paroquant checkpoint (e.g. a learned one) of the same model.")] = None,
) -> None:
    """Quantize SRC into OUT as paroquant (int4 per 128-group, RTN or learned rotations), paroquant_mxfp4
    (MXFP4 under the same rotations) or pq2 (ternary)."""
    from radiance.atomic import NoSpaceError
    from radiance.kernels.formats import FormatError
    from radiance.quantize.calibration import CalibrationError
    from radiance.quantize.convert import QuantizeError, QuantizeOptions, quantize_checkpoint
    from radiance.quantize.learned_options import LearnedOptions

    given = {k: v for k, v in (("calib", calib and str(calib)), ("samples", samples), ("seq_len", seq_len),
                               ("epochs", epochs), ("resume", resume or None)) if v is not None}
    learned = LearnedOptions(**given) if given or rotation == "learned" else None
    opts = QuantizeOptions(format, rotation, krot, seed, tuple(skip or ()), device, learned, rotations_from)
    try:
        typer.echo(quantize_checkpoint(src, out, opts))
    except (QuantizeError, FormatError, CalibrationError) as e:
        _fail(str(e), 2)
    except NoSpaceError as e:
        _fail(e.strerror, 1)


def import_gguf_cmd(
    gguf_file: Annotated[Path, typer.Argument(help="A PQ2_0 GGUF file (ggml type 142 weights).")],
    out: Annotated[Path, typer.Argument(help="Output directory, radiance pq2 layout (replaced atomically).")],
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", help="HF directory whose tokenizer files are copied in.")] = None,
) -> None:
    """Import a PQ2_0 GGUF into the radiance pq2 safetensors layout (Llama/Qwen2 names)."""
    from radiance import atomic
    from radiance.kernels.formats import FormatError
    from radiance.kernels.formats.gguf_pq2 import import_gguf_pq2
    from radiance.quantize.convert import QuantizeError, copy_tokenizer

    if not gguf_file.is_file():
        _fail(f"{gguf_file}: no such file", 2)
    try:
        with atomic.directory(out) as build:
            import_gguf_pq2(gguf_file, build)
            if tokenizer is not None:
                copy_tokenizer(tokenizer, build)
            build.chmod(0o755)
    except (FormatError, QuantizeError, OSError) as e:
        _fail(str(e), 2)
    typer.echo(out)


@eval_app.command("kl")
def eval_kl_cmd(
    quantized: Annotated[Path, typer.Argument(help="Checkpoint written by `radiance quantize`.")],
    base: Annotated[Path | None, typer.Option("--base", help="bf16 source (default: the one recorded at quantize time).")] = None,
    act: Annotated[str, typer.Option("--act", help="Activation fake-quant: none, int8_group, fp8_group, fp8_token.")] = "none",
    seq_len: Annotated[int, typer.Option("--seq-len", min=8, help="Tokens per corpus chunk.")] = 256,
    max_chunks: Annotated[int, typer.Option("--max-chunks", min=1, help="Chunks evaluated at most.")] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")] = None,
) -> None:
    """KL(source || quantized) and top-1 agreement over the shipped corpus, on CPU (float32)."""
    from radiance import atomic
    from radiance.kernels.formats import FormatError
    from radiance.quantize.evaluate import EvalError, kl_report, report_json

    try:
        r = kl_report(quantized, base, act, seq_len, max_chunks)
    except (EvalError, FormatError) as e:
        _fail(str(e), 2)
    typer.echo(
        f"{r.quant_method} act={r.act} positions={r.positions} KL={r.kl_mean:.4f} nats (max {r.kl_max:.3f}) "
        f"top-1={100 * r.top1:.2f}% ppl {r.ppl_source:.3f} -> {r.ppl_quantized:.3f}"
    )
    if json_out:
        atomic.write_text(json_out, report_json(r) + "\n")


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.command("fetch-model")(fetch_model_cmd)
    app.command("quantize")(quantize_cmd)
    app.command("import-gguf")(import_gguf_cmd)
    app.add_typer(eval_app, name="eval")
