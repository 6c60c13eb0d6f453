"""Test tiers: unmarked tests are `unit`; `gpu` tests skip without CUDA.

Missing system tools: radiance.testing.tools.require_tool (skip here, fail under CI).
"""

from __future__ import annotations

import pytest

TIERS = ("unit", "integration", "gpu")

# Shared fixture modules; each package helper adds its own line here.
pytest_plugins: list[str] = ["radiance.testing.podman", "radiance.testing.servers", "radiance.testing.models"]


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    cuda = None
    for item in items:
        if not any(item.get_closest_marker(t) for t in TIERS):
            item.add_marker(pytest.mark.unit)
        if item.get_closest_marker("gpu"):
            if cuda is None:
                cuda = _has_cuda()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="gpu test: no CUDA device here (run on the device)"))
