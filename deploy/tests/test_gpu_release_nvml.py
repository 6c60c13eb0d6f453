"""NVIDIA GPU memory release as vllm-switch sees it, through the real driver (NVML): run on the device.

A child process allocates 1 GiB with torch on GPU 0 (CUDA_DEVICE_ORDER=PCI_BUS_ID, the order the
rendered units set and gpu_nvml.py reads in); NVML lists it among GPU 0's compute processes with
that memory; once it has exited NVML lists it no longer. ~10 s (CUDA context creation).

    .venv/bin/python -m pytest -q deploy/tests/test_gpu_release_nvml.py   # needs nvidia-ml-py and a GPU
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from radiance.deploy import gpu_nvml, gpus

pytestmark = pytest.mark.gpu

HOLD = """
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("holding", flush=True)
sys.stdin.read()  # until the test closes stdin
"""


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (v := cond()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return v


def test_a_cuda_process_is_listed_on_its_gpu_until_it_exits():
    assert "GPU(s)" in gpu_nvml.describe()
    before = {u.pid for u in gpus.users("nvidia", [0])}
    env = os.environ | {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout.readline().strip() == "holding"
        mine = _wait(lambda: [u for u in gpus.users("nvidia", [0]) if u.pid not in before], 30,
                     "NVML never listed the child's CUDA context on GPU 0")
        listed = {u.pid: u for u in mine}
        assert child.pid in listed, (f"NVML lists new PIDs {sorted(listed)} on GPU 0, the child is {child.pid}: "
                                     f"NVML reports PIDs of another PID namespace here")
        use = listed[child.pid]
        assert use.used_bytes is None or use.used_bytes >= 1 << 30, use
        assert use.device.startswith("GPU-") and " at " in use.device  # UUID at PCI bus id
        (held,) = [h for h in gpus.holders("nvidia", [0]) if h.use.pid == child.pid]
        assert held.holder.name.startswith("python")
    finally:
        child.stdin.close()
        child.wait(60)
    _wait(lambda: child.pid not in {u.pid for u in gpus.users("nvidia", [0])}, 30,
          "NVML still lists the child 30 s after it exited")
