"""The kernel registries' shared rules (kernels/registry.py): disabling by name, the knob's
documented names, and the plan a layer keeps."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from radiance.kernels import registry
from radiance.kernels.nvidia import paroquant as paro_table
from radiance.knobs import KNOBS


def test_the_knob_documents_every_registered_kernel():
    doc = KNOBS["RADIANCE_DISABLED_KERNELS"].doc
    named, method = set(), ""
    for prefix, kernel in re.findall(r"`([a-z0-9_]*)\.([a-z0-9_]+)`", doc):  # `pq2.dp4a`, then `.gluon` ...
        method = prefix or method
        named.add(f"{method}.{kernel}")
    every = registry.known()
    assert named == every, f"undocumented: {every - named}; gone: {named - every}"


def test_plan_pieces_cover_every_row_once(monkeypatch):
    t = registry.Target("paroquant", "cuda", 34816, 5120, (9, 0))
    plan = registry.choose(paro_table.KERNELS, t)
    assert plan.pieces[0][0] == 1 and plan.pieces[-1][1] == registry.ROWS_MAX
    assert all(a[1] + 1 == b[0] for a, b in zip(plan.pieces, plan.pieces[1:]))
    assert plan.describe() == ("M=1..16 paroquant.mma_gl, M=17..64 paroquant.deqt, M=65..256 paroquant.wgmma, "
                               "M=257+ paroquant.scratch")
    # another method's name is known, and the HIP kernels' (the knob's check imports every registry)
    t = replace(t, disabled=frozenset({"paroquant_mxfp4.deq", "paroquant.hip_decode"}))
    assert registry.choose(paro_table.KERNELS, t).describe() == plan.describe()


def test_a_method_on_the_wrong_platform_has_no_kernel():
    with pytest.raises(NotImplementedError, match="paroquant.mma_gl: runs on cuda, not rocm"):
        registry.choose(paro_table.KERNELS, registry.Target("paroquant", "rocm", 128, 128))
