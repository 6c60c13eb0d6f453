"""What a CPU stack's launch decides from the CPU (plugin/cpu_host.py), with the CPU's answers pinned:
the dtype it serves in, the log lines naming each GEMM path, and the refusals of paths this CPU or
vLLM build lacks (the real CPUs: plugin/tests/test_cpu_gemm_branches.py, test_avx2_host.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from radiance.launcher.cli import app
from radiance.plugin import cpu_host

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"


def _dry_run(tmp_path: Path, **fields) -> tuple[int, list[str], str]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["stacks"] = {"demo": data["stacks"]["demo"] | fields}
    stacks = tmp_path / "s.yaml"
    stacks.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["demo", "--stacks", str(stacks), "--dry-run"])
    argv = next((ln for ln in res.stdout.split("exec ", 1)[1:]), "").replace("\\\n", " ").split()
    return res.exit_code, argv, res.stderr


@pytest.fixture
def no_bf16_matmul(monkeypatch):
    monkeypatch.setattr(cpu_host, "onednn_builds", lambda dtype: dtype != cpu_host.torch.bfloat16)


def test_a_cpu_with_a_bf16_matmul_serves_bf16(launch_home, tmp_path):
    code, argv, err = _dry_run(tmp_path)
    assert code == 0 and "--dtype" not in argv
    assert "serving dtype bfloat16 (vLLM's default): oneDNN has a bf16 matmul on this CPU" in err
    assert "cpu gemm: paroquant: one GEMM per linear on the folded bfloat16 weight" in err


def test_without_one_a_batching_stack_serves_fp32_and_a_single_stream_bf16(launch_home, tmp_path, no_bf16_matmul):
    code, argv, err = _dry_run(tmp_path)  # the demo: max_num_seqs 4
    assert code == 0 and argv[argv.index("--dtype") + 1] == "float32"
    assert "serving dtype float32: no bf16 matmul in oneDNN on this CPU" in err
    code, argv, err = _dry_run(tmp_path, max_num_seqs=1)
    assert code == 0 and "--dtype" not in argv and "one sequence at a time" in err
    code, argv, err = _dry_run(tmp_path, dtype="bfloat16")  # the stack's own choice wins
    assert code == 0 and argv[argv.index("--dtype") + 1] == "bfloat16" and "the stack's `dtype`" in err


def test_int4_is_refused_where_vllm_has_no_cpu_int4_gemm(launch_home, tmp_path, monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "int4")
    monkeypatch.setattr(cpu_host, "int4_gemm_available", lambda: False)
    code, _, err = _dry_run(tmp_path)
    assert code == 2 and "RADIANCE_CPU_WEIGHTS=int4: this vLLM build has no CPU int4 GEMM" in err
    assert "RADIANCE_CPU_WEIGHTS=folded" in err


def test_int4_is_refused_in_fp32(launch_home, tmp_path, monkeypatch, no_bf16_matmul):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "int4")
    monkeypatch.setattr(cpu_host, "int4_gemm_available", lambda: True)
    code, _, err = _dry_run(tmp_path)
    assert code == 2 and "takes 16-bit activations but this stack serves float32" in err


def test_vllms_own_awq_is_refused_where_its_cpu_int4_gemm_is_missing(launch_home, tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_host, "int4_gemm_available", lambda: False)
    awq = launch_home / "models" / "awq-model"
    awq.mkdir(parents=True)
    (awq / "config.json").write_text(json.dumps({"model_type": "qwen2", "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}}))
    (awq / "chat_template.jinja").write_text("{{ messages }}")
    code, _, err = _dry_run(tmp_path, quant="awq", model="awq-model")
    assert code == 2 and "quant awq: vLLM serves it on CPU with its int4 GEMM (cpu_gemm_wna16)" in err, err
