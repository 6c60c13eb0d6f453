"""Every quant method's MethodSpec (kernels/methods) fills every column, its references name real
code, and the tables that used to be kept by hand beside it are derived from it."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
import torch

from radiance.kernels import methods
from radiance.kernels.linear import DTYPES
from radiance.kernels.methods import METHODS, MethodSpec, Platform, resolve

# what a method that is not a checkpoint format (dense: a skipped linear) leaves empty
CHECKPOINT_ONLY = {"checkpoint", "bits", "group_size", "tensor_set", "validate", "dequant", "plugin", "quantize",
                   "variant"}
OPTIONAL = {"marker", "rotated", "n_pack"}  # defaults that are a value (codes, unrotated, unpacked)
# (positional parameters) of each Platform reference
ARITY = {"prepare": 2, "forward": 3, "produced": 3}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_fills_every_column(name):
    spec = METHODS[name]
    empty = {f.name for f in dataclasses.fields(MethodSpec) if getattr(spec, f.name) in (None, "", {}, ())}
    allowed = OPTIONAL | (set() if spec.checkpoint else CHECKPOINT_ONLY)
    assert empty <= allowed, f"{name} leaves {sorted(empty - allowed)} empty"
    assert spec.platforms.keys() >= {"cpu", "cuda"}, f"{name} is served on {sorted(spec.platforms)}"
    for ref in (spec.tensor_set, spec.validate, spec.dequant, spec.plugin if _has_vllm() else None, spec.quantize):
        if ref:
            assert resolve(ref) is not None
    for platform, entry in spec.platforms.items():
        for column, arity in ARITY.items():
            ref = getattr(entry, column)
            if ref is None:
                continue
            params = inspect.signature(resolve(ref)).parameters.values()
            assert len([p for p in params if p.default is p.empty]) == arity, f"{name} {platform} {column}: {ref}"
        assert (entry.produced is None) or platform != "cuda" or entry.fused_rows, f"{name} cuda fuses: its rows?"
        if entry.fused_rows:
            assert set(resolve(entry.fused_rows)) == {"norm", "silu_mul"}
        if platform != "cpu":
            assert (entry.rotation_limit is not None) == spec.rotated, f"{name} {platform}: rotation limit"
        if platform != "cpu":
            assert entry.kernels and resolve(entry.kernels), f"{name} on {platform} plans from no registry"
            assert {s.platform for s in resolve(entry.kernels)} == {platform}
            assert {s.name.split(".")[0] for s in resolve(entry.kernels)} == {name}


@pytest.mark.parametrize("name", [m for m in METHODS if METHODS[m].checkpoint])
def test_tensor_table_is_what_the_format_validates(name):
    """The spec's tensors (dtype, shape) built as zeros pass the format's own validate, and (N, K)
    read back from the codes is the linear's."""
    spec = METHODS[name]
    n, k, krot = 256, 512, 4
    tensors = {t: torch.zeros(shape, dtype=DTYPES[dtype]) for t, (dtype, shape) in spec.shapes(n, k, krot).items()}
    if spec.rotated:
        tensors["pairs"] = torch.arange(128, dtype=torch.int16).repeat(krot, k // 128)
    if name == "paroquant_mxfp4":
        tensors["weight_scale"] += 120  # e8m0 2^-7 (zero is a legal exponent; the fold's window needs one)
    t = resolve(spec.tensor_set)(**tensors)
    resolve(spec.validate)(t, "model.layers.0.mlp.down_proj", spec.bits, spec.group_size)
    assert spec.nk(tuple(tensors[spec.codes].shape)) == (n, k)
    assert tuple(resolve(spec.tensor_set).TENSORS) == tuple(spec.tensors)


def test_the_method_lists_are_derived():
    from radiance import checkpoint, stack
    from radiance.kernels import linear_spec, warmup  # noqa: F401
    from radiance.quantize import convert

    assert stack.PLUGIN_METHODS == convert.FORMATS == methods.CHECKPOINT_METHODS == ("paroquant", "pq2",
                                                                                    "paroquant_mxfp4")
    assert {m: stack.CHECKPOINT_METHOD[m] for m in stack.PLUGIN_METHODS} == {m: m for m in stack.PLUGIN_METHODS}
    assert methods.ROTATED_METHODS == ("paroquant", "paroquant_mxfp4")
    assert checkpoint.linear_tensors("awq", 8, 128) == {"weight": ("BF16", [8, 128])}
    with pytest.raises(NotImplementedError, match="no kernels for method=pq2 on platform=rocm"):
        METHODS["pq2"].platform("rocm")


def test_a_new_platform_entry_is_all_ops_needs(monkeypatch):
    """ops.prepare / linear_forward know no method: a MethodSpec entry pointing at other code serves."""
    from radiance.kernels import ops

    monkeypatch.setitem(METHODS["pq2"].platforms, "xpu", Platform(prepare=f"{__name__}:_prepare",
                                                                   forward=f"{__name__}:_forward"))
    _CALLS[:] = []
    prep = ops.prepare("pq2", {"qweight": torch.zeros(16, 32, dtype=torch.uint8), "scales": torch.ones(16, 1).half()},
                       platform="xpu")
    y = ops.linear_forward(prep, torch.ones(2, 128))
    assert _CALLS == ["prepare", "forward"] and y.shape == (2, 16)


_CALLS: list[str] = []


def _prepare(prep, tensors):
    _CALLS.append("prepare")


def _forward(prep, x, bias):
    _CALLS.append("forward")
    return x.new_zeros(x.shape[0], prep.out_features)


def test_the_descriptions_import_without_torch():
    """The launcher, `radiance setup` and the stack schema read the specs where no torch is installed."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import radiance.kernels.methods, radiance.stack, radiance.checkpoint, radiance.launcher.kernel_specs\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _has_vllm() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True
