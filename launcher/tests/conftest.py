"""Launcher test fixtures: a fixed, machine-independent RADIANCE_HOME with the example stacks' models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radiance.testing.shape_only import layer_shapes, write_headers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "stacks.example.yaml"

# Checkpoint dirs the example stack file names, with the quant method each declares. config.json
# and a shape-only weights header are written: the plan reads them; the dry-run never reads weights.
EXAMPLE_MODELS = {
    "qwen2.5-coder-0.5b/paroquant-random-k8-s0": "paroquant",
    "Qwen3.8-27B-PARO": "paroquant",
    "Qwen3.8-27B-MXFP4-PARO": "paroquant_mxfp4",
    "Qwen3.8-27B-PQ2": "pq2",
    "Qwen3.8-27B-DFlash2-FP8": None,
}


BUNDLED_TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"


def write_model(models: Path, rel: str, quant: str | None) -> Path:
    d = models / rel
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}
    if quant:
        cfg["quantization_config"] = {"quant_method": quant, "bits": 4 if quant != "pq2" else 2, "group_size": 128}
    (d / "config.json").write_text(json.dumps(cfg, sort_keys=True))
    (d / "chat_template.jinja").write_text(BUNDLED_TEMPLATE)  # the example stacks say `chat_template: model`
    # one layer of the 27B widths (Qwen2 names): what the example's check_shapes name
    write_headers(d / "model.safetensors", layer_shapes(quant or "none", 5120, 5120, 1024, 17408))
    return d


@pytest.fixture
def launch_home(tmp_path, monkeypatch) -> Path:
    """RADIANCE_HOME in tmp with every example model dir; no other RADIANCE_* from the caller's shell."""
    import os

    for k in list(os.environ):
        if k.startswith("RADIANCE_"):
            monkeypatch.delenv(k)
    home = tmp_path / "home"
    monkeypatch.setenv("RADIANCE_HOME", str(home))
    # a CPU stack's launch asks this CPU for its dtype: pinned to one with a bf16 matmul, so dry runs
    # do not depend on the machine (test_cpu_launch.py pins the others)
    from radiance.plugin import cpu_host

    monkeypatch.setattr(cpu_host, "onednn_builds", lambda dtype: True)
    for rel, quant in EXAMPLE_MODELS.items():
        write_model(home / "models", rel, quant)
    return home
