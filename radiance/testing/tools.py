"""The rule for tests that need a system tool (podman, clang-19, prometheus, ...).

Skipped with the reason on a developer's machine; a failure under CI (CI=true or
RADIANCE_REQUIRE_ALL=1), where .ci/run installs everything and a skip would hide a broken install.
"""

from __future__ import annotations

import os
import shutil

import pytest


def strict() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("RADIANCE_REQUIRE_ALL") == "1"


def require(condition: bool, reason: str) -> None:
    if not condition:
        if strict():
            pytest.fail(f"{reason} (required under CI)")
        pytest.skip(reason)


def require_tool(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    require(not missing, f"needs {', '.join(missing)} on PATH (.ci/run installs it)")
