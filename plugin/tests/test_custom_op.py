"""The token-count dispatch lives inside the custom op: torch.compile traces one opaque call and
does not recompile when M crosses the decode/prefill band."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.testing

pytestmark = pytest.mark.integration  # real vLLM, in process


def test_compiled_graph_does_not_specialize_on_m(tmp_path, vllm_dist, tiny):
    state = tiny.quantize_state(tiny.dense_state(), "paroquant", shared_qkv=False)
    model, _ = tiny.load_in_vllm(tiny.write_checkpoint(tmp_path / "ckpt", state, tiny.PARO_CFG))
    qkv = model.model.layers[0].self_attn.qkv_proj

    def fn(x):
        return qkv(x)[0] * 2

    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=counter, dynamic=True, fullgraph=True)
    torch._dynamo.reset()
    for m in (2, 5, 70, 300):  # both bands
        x = torch.randn(m, tiny.H).bfloat16()
        assert torch.equal(compiled(x), fn(x))
    assert counter.frame_count == 1, f"recompiled {counter.frame_count} times"
    assert counter.op_count <= 4  # reshape, the op, reshape, mul: the band choice is not in the graph
