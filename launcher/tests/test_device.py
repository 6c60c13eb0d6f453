"""Which GPUs a stack gets, and the refusal rules, judged on what the serving process sees.

No GPU exists on the CI machine, so the hardware is faked and named so: FAKE_* Device values for the
pure rules; a FAKE KFD sysfs tree (the files the amdgpu driver writes) for AMD, read by the real
detection code, which applies HIP_VISIBLE_DEVICES itself; a FAKE CUDA runtime for NVIDIA that
renumbers the host's GPUs by CUDA_VISIBLE_DEVICES as CUDA does. The launcher, its environment
handling and the rendered unit are real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance import kfd
from radiance.deploy import render, unitspec
from radiance.launcher import device
from radiance.launcher.device import Device, DeviceError, check, detect, gpu_env, refusal, take_gpus
from radiance.stack import load_stacks, parse_stacks

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"
FAKE_R9700_X2 = Device("amd", ("gfx1201", "gfx1201"), "fake")
FAKE_RX7900 = Device("amd", ("gfx1100",), "fake")
FAKE_RTX3090 = Device("nvidia", ("sm_86",), "fake")
FAKE_RTX2060 = Device("nvidia", ("sm_75",), "fake")
FAKE_H200 = Device("nvidia", ("sm_90",), "fake")
CPU = Device("cpu", (), "none")
# A FAKE host with an RX 7900 (gfx1100, 110000), an R9700 (gfx1201, 120001) and another R9700, in
# KFD topology order behind the CPU node; and a FAKE NVIDIA side: an RTX 3090 and an RTX 2060 in PCI order.
FAKE_KFD_GPUS = ((48821, 0x0300, 110000), (17454, 0x8300, 120001), (9321, 0xc300, 120001))
FAKE_CUDA_HOST = ("sm_86", "sm_75")


def write_fake_kfd(root: Path) -> Path:
    """A FAKE /sys/class/kfd/kfd: a CPU node and FAKE_KFD_GPUS."""
    nodes = root / "topology" / "nodes"
    for n, (gid, loc, gfx) in enumerate([(0, 0, 0), *FAKE_KFD_GPUS]):
        d = nodes / str(n)
        d.mkdir(parents=True)
        (d / "gpu_id").write_text(f"{gid}\n")
        (d / "properties").write_text(f"cpu_cores_count 0\nsimd_count 128\nlocation_id {loc}\ndomain 0\n"
                                      f"gfx_target_version {gfx}\n")
    return root


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """FAKE hardware: the KFD tree above, and a CUDA runtime that applies CUDA_VISIBLE_DEVICES to
    FAKE_CUDA_HOST the way CUDA does (indices into the PCI-ordered list, stopping at a bad one)."""
    monkeypatch.setattr(kfd, "KFD", write_fake_kfd(tmp_path / "kfd"))

    def fake_cuda(environ):
        assert os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", "CUDA would number the GPUs fastest-first"
        seen = []
        for i in (int(x) for x in os.environ.get("CUDA_VISIBLE_DEVICES", "0,1").split(",")):
            if i >= len(FAKE_CUDA_HOST):
                break
            seen.append(FAKE_CUDA_HOST[i])
        return Device("nvidia", tuple(seen), "FAKE CUDA", f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")

    monkeypatch.setattr(device, "detect_nvidia", fake_cuda)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES"):
        monkeypatch.setenv(var, "")  # recorded, so the launcher's own settings are undone after the test
        monkeypatch.delenv(var)


def test_the_kfd_topology_names_each_gpu_in_hips_order(fake_host):
    assert [(g.gfx, g.bus) for g in kfd.gpus()] == [("gfx1100", "0000:03:00.0"), ("gfx1201", "0000:83:00.0"),
                                                    ("gfx1201", "0000:c3:00.0")]


@pytest.mark.parametrize("arch, devices, visible", [
    ("gfx1201", [1], ("gfx1201",)),  # the R9700 beside an RX 7900: one visible GPU, index 0
    ("gfx1201", [1, 2], ("gfx1201", "gfx1201")),
    ("gfx1100", [0], ("gfx1100",)),
    ("sm_75", [1], ("sm_75",)),  # the RTX 2060 beside a 3090 (and AMD GPUs: a mixed host)
    ("sm_86", [0], ("sm_86",)),
    ("sm_75", [0, 1], ("sm_86", "sm_75")),
])
def test_a_stack_off_gpu_0_runs_on_the_gpus_it_names(fake_host, arch, devices, visible):
    dev = take_gpus(arch, devices, "x")
    assert dev.archs == visible
    assert {k: os.environ[k] for k in gpu_env(arch, devices)} == gpu_env(arch, devices)


@pytest.mark.parametrize("arch, devices, why", [
    ("gfx1201", [0], "its GPU 0 (visible as 0) is gfx1100"),
    ("gfx1201", [0, 2], "its GPU 0 (visible as 0) is gfx1100"),
    ("gfx1201", [3], "uses host GPU(s) [3], but this process sees 0 there"),
    ("gfx1201", [1, 5], "uses host GPU(s) [1, 5], but this process sees 1 there"),
    ("sm_86", [1], "needs NVIDIA sm_86 or newer; its GPU 1 (visible as 0) is sm_75 (Turing"),
    ("sm_75", [2], "uses host GPU(s) [2], but this process sees 0 there"),
])
def test_the_wrong_gpu_or_a_missing_one_is_refused(fake_host, arch, devices, why):
    with pytest.raises(DeviceError, match="cannot run here") as e:
        take_gpus(arch, devices, "x")
    assert why in str(e.value), str(e.value)


def test_a_visibility_variable_set_otherwise_is_refused_not_overridden(fake_host, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(DeviceError, match=r"this environment sets CUDA_VISIBLE_DEVICES=0, which would pick other GPUs"):
        take_gpus("sm_75", [1], "turing")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # what the unit sets: the same GPUs
    assert take_gpus("sm_75", [1], "turing").archs == ("sm_75",)


def test_the_unit_the_dry_run_and_a_launch_by_hand_name_the_same_gpus(launch_home, tmp_path):
    """For every GPU stack of the example, and the same stacks moved off GPU 0: the rendered unit's
    GPU variables are the ones `--dry-run` exports (and a launch by hand sets: vllm_env)."""
    from radiance.launcher.cli import app

    moved = EXAMPLE.read_text().replace("devices: [0, 1]", "devices: [0, 2]").replace("devices: [0]", "devices: [1]")
    for text in (EXAMPLE.read_text(), moved):
        f = tmp_path / "stacks.yaml"
        f.write_text(text)
        sf = load_stacks(f)
        for name, st in sf.stacks.items():
            if st.arch == "cpu":
                continue
            unit = render.render_unit(unitspec.unit_spec(sf, name))
            dry = CliRunner().invoke(app, [name, "--stacks", str(f), "--dry-run"])
            assert dry.exit_code == 0, dry.output
            for k, v in gpu_env(st.arch, st.devices).items():
                assert f"export {k}={v}\n" in dry.stdout, (name, k, dry.stdout)
                assert f"Environment={k}={v}\n" in unit or f"--env {k}={v} " in unit, (name, k)
            assert ("CUDA_DEVICE_ORDER=PCI_BUS_ID" in dry.stdout) == (st.vendor == "nvidia")


def test_the_real_launcher_under_its_units_environment_takes_gpu_1(fake_host, launch_home, tmp_path, monkeypatch):
    """`devices: [1]` through the real CLI with the environment its rendered unit sets: the device
    step passes (it used to refuse: 'needs 2 GPUs, sees 1') and the launch goes on to build kernels
    (no hipcc here: that is where it stops)."""
    import logging

    from radiance.launcher.cli import app

    # the CLI logs to the stderr it finds on its first call: give it this invocation's
    monkeypatch.setattr(logging.getLogger("radiance.launch"), "handlers", [])
    f = tmp_path / "stacks.yaml"
    f.write_text(EXAMPLE.read_text().replace("runtime: podman\n    image: localhost/radiance-rocm:latest\n    model: "
                                             "Qwen3.8-27B-PARO", "runtime: native\n    model: Qwen3.8-27B-PARO")
                 .replace("    devices: [0, 1]\n    tp: 2\n    port: 8080\n    container: qwen_vllm_paro\n",
                          "    devices: [1]\n    tp: 1\n    port: 8080\n"))
    sf = load_stacks(f)
    unit_env = unitspec.unit_spec(sf, "paro").env
    assert unit_env["HIP_VISIBLE_DEVICES"] == "1"
    res = CliRunner().invoke(app, ["paro", "--stacks", str(f), "--mode", "eval"],
                             env={"HIP_VISIBLE_DEVICES": unit_env["HIP_VISIBLE_DEVICES"]})
    assert "cannot run here" not in res.output, res.output
    assert "device: 1 AMD GPU(s) visible [0: gfx1201 at 0000:83:00.0] under HIP_VISIBLE_DEVICES=1 (via KFD " \
           "topology); stack paro (gfx1201, host GPU(s) 1)" in res.output, res.output
    assert "kernel" in res.output.lower() and res.exit_code == 1, res.output


@pytest.mark.parametrize("arch,devices,dev", [
    ("gfx1201", [0, 1], FAKE_R9700_X2),
    ("sm_86", [3], FAKE_RTX3090),  # host GPU 3, the only one visible
    ("sm_86", [0], FAKE_H200),  # newer NVIDIA runs older-arch stacks (Triton JITs for the device)
    ("sm_75", [0], FAKE_RTX3090),
    ("cpu", [], CPU),
    ("cpu", [], FAKE_H200),
])
def test_runnable(arch, devices, dev):
    assert refusal(arch, devices, dev) is None


@pytest.mark.parametrize("arch,devices,dev,why", [
    ("gfx1201", [0, 1], FAKE_RTX3090, "is for AMD gfx1201"),
    ("gfx1201", [0], FAKE_RX7900, "HIP kernels are for gfx1201 only; its GPU 0 (visible as 0) is gfx1100"),
    ("gfx1201", [0, 1], CPU, "no GPU (CPU only)"),
    ("sm_86", [0], FAKE_R9700_X2, "is for NVIDIA sm_86"),
    ("sm_86", [0], FAKE_RTX2060, "needs NVIDIA sm_86 or newer; its GPU 0 (visible as 0) is sm_75 (Turing"),
    ("sm_90", [0], FAKE_RTX3090, "sm_90 or newer"),
    ("gfx1201", [0, 1, 2], FAKE_R9700_X2, "uses host GPU(s) [0, 1, 2], but this process sees 2 there"),
])
def test_refused(arch, devices, dev, why):
    msg = refusal(arch, devices, dev)
    assert msg is not None and why in msg


def test_check_names_the_stack():
    with pytest.raises(DeviceError, match=r"stack 'paro' cannot run here: the stack is for AMD gfx1201"):
        check("gfx1201", [0, 1], FAKE_RTX3090, "paro")


def test_detect_runs_here():
    for arch in ("cpu", "sm_86", "gfx1201"):
        d = detect(arch)
        assert d.vendor in ("amd", "nvidia", "cpu") and d.describe()


def test_launch_refuses_a_stack_this_device_cannot_run(launch_home):
    """The real CLI on this machine's real device: a GPU stack is refused (exit 1), before any build."""
    from radiance.launcher.cli import app

    if detect("sm_75").vendor == "nvidia":
        pytest.skip("this machine has an NVIDIA GPU; the turing stack may run here")
    res = CliRunner().invoke(app, ["turing", "--stacks", str(EXAMPLE)],
                             env={"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None})
    assert res.exit_code == 1
    assert "radiance-launch: error: stack 'turing' cannot run here: the stack is for NVIDIA sm_75" in res.stderr
    assert not (launch_home / "kernels").exists()  # refused before the kernel step


def test_a_stack_file_with_gpus_on_several_indices_loads():
    text = ("version: 1\nstacks:\n  x:\n    arch: gfx1201\n    model: m\n    quant: paroquant\n    port: 1\n"
            "    devices: [0, 2]\n    tp: 2\n")
    assert parse_stacks(text, Path("s.yaml")).get("x").devices == [0, 2]
