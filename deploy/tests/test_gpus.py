"""GPU memory users as the driver reports them, for AMD against a FAKE sysfs tree (milliseconds).

No AMD GPU can exist on the CI machine, so `fake_kfd` writes the files the amdgpu driver's KFD
exposes (`/sys/class/kfd/kfd/topology/nodes/<n>/{gpu_id,properties}` and
`/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>`), with the layout of a 2 x R9700 host: node 0 the
CPU, nodes 1 and 2 the GPUs. The processes named in it are real (their names come from /proc).
The NVIDIA path runs against the real driver on the device: test_gpu_release_nvml.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from radiance.deploy import gpu_kfd, gpus

GPU_IDS = (48821, 17454)  # KFD's gpu_id of HIP devices 0 and 1
LOCATIONS = (0x0300, 0x8300)  # bus 0x03 and 0x83, device 0, function 0


def _node(root: Path, n: int, gpu_id: int, location: int) -> None:
    d = root / "topology" / "nodes" / str(n)
    d.mkdir(parents=True)
    (d / "gpu_id").write_text(f"{gpu_id}\n")
    (d / "properties").write_text(f"cpu_cores_count 0\nsimd_count 128\nlocation_id {location}\ndomain 0\n")


@pytest.fixture
def fake_kfd(tmp_path) -> Path:
    """A FAKE /sys/class/kfd/kfd of a host with two AMD GPUs and no compute process yet."""
    root = tmp_path / "kfd"
    _node(root, 0, 0, 0)  # the CPU node: gpu_id 0
    for n, (gid, loc) in enumerate(zip(GPU_IDS, LOCATIONS), start=1):
        _node(root, n, gid, loc)
    (root / "proc").mkdir()
    return root


def _uses(root: Path, pid: int, vram: dict[int, int]) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(exist_ok=True)
    (d / "pasid").write_text("32770\n")
    for gid, used in vram.items():
        (d / f"vram_{gid}").write_text(f"{used}\n")


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "60"])
    comm = Path(f"/proc/{p.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().strip() != "sleep":  # until the forked child has exec'd sleep
        assert time.monotonic() < deadline, "sleep did not start"
        time.sleep(0.01)
    yield p
    p.kill()
    p.wait()


def test_gpu_nodes_in_topology_order_with_bus_ids(fake_kfd):
    assert gpu_kfd.gpu_nodes(fake_kfd) == [(48821, "0000:03:00.0"), (17454, "0000:83:00.0")]


def test_a_process_holding_vram_is_a_user_until_it_lets_go(fake_kfd, sleeper, monkeypatch):
    monkeypatch.setattr(gpu_kfd, "KFD", fake_kfd)
    _uses(fake_kfd, sleeper.pid, {GPU_IDS[0]: 0, GPU_IDS[1]: 6 << 30})  # vLLM on GPU 1 only
    _uses(fake_kfd, 999999, {GPU_IDS[0]: 0, GPU_IDS[1]: 0})  # a ROCm tool: /dev/kfd open, no memory
    assert gpus.users("rocm", [0]) == []
    (held,) = gpus.holders("rocm", [1])
    assert held.use.pid == sleeper.pid and held.use.used_bytes == 6 << 30
    assert held.describe() == f"PID {sleeper.pid} (sleep) with 6144 MiB on GPU 1 (gpu_id 17454 at 0000:83:00.0)"
    (fake_kfd / "proc" / str(sleeper.pid) / f"vram_{GPU_IDS[1]}").write_text("0\n")  # freed
    assert gpus.users("rocm", [0, 1]) == []


def test_unknown_index_and_missing_driver_are_clear_errors(fake_kfd, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_kfd, "KFD", fake_kfd)
    with pytest.raises(gpus.GpuQueryError, match=r"GPU 2: KFD lists 2 AMD GPU\(s\) \(indices 0..1\)"):
        gpus.users("rocm", [2])
    monkeypatch.setattr(gpu_kfd, "KFD", tmp_path / "no-kfd")
    with pytest.raises(gpus.GpuQueryError, match="the amdgpu driver \\(KFD\\) is not loaded"):
        gpus.users("rocm", [0])


def test_cpu_stacks_hold_no_gpu_and_vendors_are_checked():
    assert gpus.users("cpu", []) == []
    with pytest.raises(ValueError, match="unknown GPU vendor 'intel'"):
        gpus.users("intel", [0])


def test_nvidia_without_a_driver_is_a_clear_error():
    # nvidia-ml-py is installed here (the test extra), the NVIDIA driver is not
    with pytest.raises(gpus.GpuQueryError, match=r"NVML cannot start .*is the NVIDIA driver loaded"):
        gpus.users("nvidia", [0])
