"""Device detection and the refusal rules.

`refusal` is pure, so the AMD/NVIDIA rules are checked here with Device values; the AMD and NVIDIA
devices below are fakes (no such hardware on the CI machine), named FAKE_*. `detect()` itself runs
for real on whatever this machine is.
"""

from pathlib import Path

import pytest

from radiance.launcher.device import Device, DeviceError, check, detect, parse_rocminfo, refusal

FAKE_R9700_X2 = Device("amd", "gfx1201", 2, "fake")
FAKE_RX7900 = Device("amd", "gfx1100", 1, "fake")
FAKE_RTX3090 = Device("nvidia", "sm_86", 1, "fake")
FAKE_RTX2060 = Device("nvidia", "sm_75", 1, "fake")
FAKE_H200 = Device("nvidia", "sm_90", 1, "fake")
CPU = Device("cpu", "cpu", 0, "none")

# The shape of `rocminfo` output (agents separated by rows of asterisks), trimmed to the fields
# parse_rocminfo reads; written by hand: no AMD GPU exists where these tests run.
ROCMINFO_SAMPLE = """\
ROCk module is loaded
=====================
HSA Agents
==========
*******
Agent 1
*******
  Name:                    AMD Ryzen 9 7950X 16-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx1201
  Marketing Name:          AMD Radeon AI PRO R9700
  Device Type:             GPU
*******
Agent 3
*******
  Name:                    gfx1201
  Marketing Name:          AMD Radeon AI PRO R9700
  Device Type:             GPU
*** Done ***
"""


def test_parse_rocminfo_lists_gpu_agents_only():
    assert parse_rocminfo(ROCMINFO_SAMPLE) == ["gfx1201", "gfx1201"]
    assert parse_rocminfo("") == []


def test_detect_runs_here():
    d = detect()
    assert d.vendor in ("amd", "nvidia", "cpu") and d.describe()
    if d.vendor == "cpu":
        assert (d.arch, d.count) == ("cpu", 0)


@pytest.mark.parametrize("arch,devices,device", [
    ("gfx1201", [0, 1], FAKE_R9700_X2),
    ("sm_86", [0], FAKE_RTX3090),
    ("sm_86", [0], FAKE_H200),  # newer NVIDIA runs older-arch stacks (Triton JITs for the device)
    ("sm_75", [0], FAKE_RTX3090),
    ("cpu", [], CPU),
    ("cpu", [], FAKE_H200),
])
def test_runnable(arch, devices, device):
    assert refusal(arch, devices, device) is None


@pytest.mark.parametrize("arch,devices,device,why", [
    ("gfx1201", [0, 1], FAKE_RTX3090, "built for AMD gfx1201"),
    ("gfx1201", [0], FAKE_RX7900, "for gfx1201 only, this AMD GPU is gfx1100"),
    ("gfx1201", [0, 1], CPU, "no GPU (CPU only)"),
    ("sm_86", [0], FAKE_R9700_X2, "for NVIDIA sm_86"),
    ("sm_86", [0], FAKE_RTX2060, "needs NVIDIA sm_86 or newer; this GPU is sm_75 (Turing"),
    ("sm_90", [0], FAKE_RTX3090, "sm_90 or newer"),
    ("gfx1201", [0, 1, 2], FAKE_R9700_X2, "GPU indices [0, 1, 2] but this machine shows 2"),
])
def test_refused(arch, devices, device, why):
    msg = refusal(arch, devices, device)
    assert msg is not None and why in msg


def test_check_names_the_stack():
    with pytest.raises(DeviceError, match=r"stack 'paro' cannot run here: the stack is built for AMD gfx1201"):
        check("gfx1201", [0, 1], FAKE_RTX3090, "paro")


def test_launch_refuses_a_stack_this_device_cannot_run(launch_home):
    """The real CLI on this machine's real device: a GPU stack is refused (exit 1), before any build."""
    from typer.testing import CliRunner

    from radiance.launcher.cli import app

    d = detect()
    if d.vendor == "nvidia":
        pytest.skip("this machine has an NVIDIA GPU; the turing stack may run here")
    example = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"
    res = CliRunner().invoke(app, ["turing", "--stacks", str(example)])
    assert res.exit_code == 1
    assert "radiance-launch: error: stack 'turing' cannot run here: the stack is for NVIDIA sm_75" in res.stderr
    assert not (launch_home / "kernels").exists()  # refused before the kernel step
