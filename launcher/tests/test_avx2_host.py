"""`scripts/demo`'s serve on a CPU without AVX-512 (most desktops), and what a user sees when a server
dies. The AVX2 host is emulated (radiance/testing/avx2_host: oneDNN capped at AVX2, vLLM's AVX2
kernel library, torch's CPU queries answering no AVX-512): on it vLLM's bf16 linears take torch's
fallback GEMM, which radiance's folded path used to call without a weight (a crash at the first
request)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from radiance.testing.servers import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AVX2_HOST = ROOT / "radiance" / "testing" / "avx2_host"
EXAMPLE = ROOT / "deploy" / "stacks.example.yaml"


def _demo(tmp_path: Path, model: Path, pythonpath: str = "", **stack_fields) -> subprocess.CompletedProcess:
    data = yaml.safe_load(EXAMPLE.read_text())
    stack = data["stacks"]["demo"] | {"port": free_port(), "model": str(model)} | stack_fields
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(yaml.safe_dump({"version": 1, "stacks": {"demo": stack}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADIANCE_")}
    env["RADIANCE_HOME"] = str(tmp_path / "home")
    if pythonpath:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run([sys.executable, "-m", "radiance.launcher.demo", "--once", "--stacks", str(stacks),
                           "--startup-s", "400"], env=env, capture_output=True, text=True, timeout=900)


def test_demo_in_bf16_on_an_avx2_host_gives_a_completion(tmp_path, qwen_paro_dir):
    """bf16 on AVX2: vLLM's torch fallback for every linear (the branch that crashed)."""
    p = _demo(tmp_path, qwen_paro_dir, str(AVX2_HOST), dtype="bfloat16")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "demo: ready" in p.stdout and "tokens in" in p.stdout
    log = (tmp_path / "home" / "logs" / "demo.log").read_text()
    cpu_line = next(ln for ln in log.splitlines() if "radiance-launch: cpu: " in ln)  # the launcher's
    assert "AVX2" in cpu_line and "serving dtype bfloat16: the stack's `dtype`" in cpu_line
    assert "paroquant: one GEMM per linear on the folded bfloat16 weight (RADIANCE_CPU_WEIGHTS=folded): torch" in log
    assert "paroquant on CPU: RADIANCE_CPU_WEIGHTS=folded, vLLM's torch GEMM in bfloat16" in log  # the worker's


def test_a_server_that_dies_is_named_by_its_first_exception(tmp_path, qwen_paro_dir):
    """A checkpoint the plugin refuses (group size 64): vLLM dies at start-up; the demo and
    radiance-launch name the plugin's error, exit non-zero, and the shutdown noise comes after."""
    bad = tmp_path / "bad-model"
    bad.mkdir()
    for f in qwen_paro_dir.iterdir():
        if f.name != "config.json":
            (bad / f.name).symlink_to(f)
    cfg = json.loads((qwen_paro_dir / "config.json").read_text())
    cfg["quantization_config"]["group_size"] = 64
    (bad / "config.json").write_text(json.dumps(cfg))
    p = _demo(tmp_path, bad)
    assert p.returncode != 0
    first = next(line for line in p.stderr.splitlines() if line.startswith("demo: the server died: "))
    assert "group_size" in first and "(at " in first, p.stderr[-3000:]
    log = (tmp_path / "home" / "logs" / "demo.log").read_text()
    assert "radiance-launch: the server died: " in log  # the launcher's own last word, in the server's log
