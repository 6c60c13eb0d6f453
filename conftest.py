"""Test tiers (unit / integration / gpu) and the rule for missing tools.

A test that needs a tool this machine lacks (podman, clang-19, prometheus, a GPU) is skipped
with the reason on a developer's machine, and fails under CI (CI=true or RADIANCE_REQUIRE_ALL=1),
where .ci/run installs everything: a skip there would hide a broken install step.
"""

from __future__ import annotations

import os
import shutil

import pytest

TIERS = ("unit", "integration", "gpu")


def _strict() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("RADIANCE_REQUIRE_ALL") == "1"


def require_tool(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        msg = f"needs {', '.join(missing)} on PATH (.ci/run installs it)"
        if _strict():
            pytest.fail(msg)
        pytest.skip(msg)


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
