"""The folder -> radiance.<folder> mapping in pyproject.toml covers every package folder."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg["package-dir"]
    listed = set(cfg["packages"])
    found = set()
    for pkg, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "tests" in rel.parts:
                continue
            found.add(".".join([pkg, *rel.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "listed packages without an __init__.py"


def test_subpackages_import_from_their_folders():
    import radiance.kernels
    import radiance.launcher

    assert Path(radiance.kernels.__file__).parent == ROOT / "kernels"
    assert Path(radiance.launcher.__file__).parent == ROOT / "launcher"


def test_gpu_extra_declares_the_tested_vllm_range():
    from radiance.compat import VLLM_RANGE

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gpu"] == [f"vllm{VLLM_RANGE}"]
