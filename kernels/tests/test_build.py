"""The kernel build cache: keyed by sources + arch + flags, atomic, reused (a second call builds nothing)."""

import shutil
from pathlib import Path

import pytest

from radiance.kernels import build as kb
from radiance.kernels.build import BuildResult, KernelBuildError, build_key, build_kernels, kernel_dir

HIP_SRC = Path(kb.__file__).resolve().parent / "hip"


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) if cache.exists() else []


def test_cpu_builds_nothing(tmp_path):
    assert build_kernels("cpu", tmp_path / "k") == BuildResult(None, False, "cpu")
    assert kernel_dir("cpu", tmp_path / "k") is None
    assert not (tmp_path / "k").exists()


def test_second_build_is_a_cache_hit(tmp_path):
    """sm_86 runs the real Triton builder (its warm-up list); the second call reuses the entry."""
    cache = tmp_path / "k"
    first = build_kernels("sm_86", cache)
    assert first.built and first.path == kernel_dir("sm_86", cache)
    assert (first.path / kb.MANIFEST).is_file()
    second = build_kernels("sm_86", cache)
    assert second == BuildResult(first.path, False, first.key)
    assert _entries(cache) == [first.path.name]


def test_key_covers_arch_flags_and_sources(tmp_path):
    src = tmp_path / "hip"
    shutil.copytree(HIP_SRC, src)
    base = build_key("gfx1201", ["-DPQ_WPERM=1"], src)
    assert build_key("gfx1201", ["-DPQ_WPERM=0"], src) != base
    assert build_key("gfx1200", ["-DPQ_WPERM=1"], src) != base
    assert build_key("gfx1201", ["-DPQ_WPERM=1"], src) == base
    hdr = next(src.glob("*.h"))
    hdr.write_text(hdr.read_text() + "\n// changed\n")
    assert build_key("gfx1201", ["-DPQ_WPERM=1"], src) != base


def test_failed_build_leaves_no_entry_and_a_retry_builds(tmp_path, monkeypatch):
    """A builder that writes part of its output and then fails: the entry never appears."""
    cache = tmp_path / "k"

    def half_then_fail(arch, src, flags, out, **_):
        (out / "half.so").write_bytes(b"\x7fELF")
        raise RuntimeError("compiler crashed")

    monkeypatch.setitem(kb.BUILDERS, "triton", half_then_fail)
    with pytest.raises(KernelBuildError, match=r"the sm_86 kernel build failed: RuntimeError: compiler crashed"):
        build_kernels("sm_86", cache)
    assert _entries(cache) == []
    assert not any(p.name.endswith(".tmp") for p in cache.iterdir())
    monkeypatch.undo()
    assert build_kernels("sm_86", cache).built


def test_gfx1201_without_hipcc_is_a_clear_error(tmp_path):
    if shutil.which("hipcc") or Path("/opt/rocm/bin/hipcc").exists():
        pytest.skip("hipcc is installed here; the missing-compiler path cannot be shown")
    cache = tmp_path / "k"
    with pytest.raises(KernelBuildError, match=r"cannot build the gfx1201 kernels: .*hipcc"):
        build_kernels("gfx1201", cache, ["-DPQ_WPERM=1"])
    assert _entries(cache) == []


def test_unknown_arch():
    with pytest.raises(KernelBuildError, match="expected cpu, an AMD gfx target or an NVIDIA sm_XY"):
        build_kernels("tpu_v5", Path("/nonexistent"))
