"""Only plugin/ imports vLLM (radiance.kernels must run without it: kernels/tests/test_ops.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["radiance", "kernels", "launcher", "deploy", "healthchecks", "quantize"]
# Known, to be removed: the launcher's plugin check should call radiance.plugin.check_registered.
KNOWN: set[str] = set()


def _imports_vllm(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        if any(n == "vllm" or n.startswith("vllm.") for n in names):
            lines.append(node.lineno)
    return lines


def test_no_vllm_import_outside_the_plugin():
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "tests" in path.relative_to(ROOT).parts:
                continue
            rel = str(path.relative_to(ROOT))
            offenders += [f"{rel}:{line}" for line in _imports_vllm(path) if rel not in KNOWN]
    assert not offenders, f"import vLLM only in plugin/ (call radiance.plugin.check_registered instead): {offenders}"


def test_check_registered():
    from radiance.plugin import check_registered

    check_registered("paroquant")
    check_registered("pq2")
    with pytest.raises(RuntimeError, match="'awq' is not registered by the radiance plugin"):
        check_registered("awq")
