"""A podman stack installed as Quadlet and run by real systemd, with real podman 5 inside.

The box is Debian trixie (fixture quadlet_image: systemd as PID 1, podman 5.4 with Quadlet) run
`--privileged` so that its podman can run containers. `radiance render --system` writes the
stack's `.container` where the Quadlet generator reads it; `daemon-reload` generates
`radiance-q.service`. One test drop-in (Quadlet's `.container.d/`) makes the container's command
the FAKE vLLM (`radiance/testing/fake_vllm.py`, no vLLM in this box) on the box's network, and
shortens the health check (2 s interval, 2 misses) so that a hang is seen in seconds; every other
line is the rendered unit's: ExecStartPost readiness, HealthOnFailure=kill, Restart=on-failure,
RunInit, DropCapability=all, NoNewPrivileges, user 10001, the API key as credential + podman secret.
The container image is the box's own Debian with radiance installed and a FAKE vLLM distribution
record (0.32.0, inside radiance's tested range: vllm-switch asks the image for its vLLM before it
stops anything). Stack `n` is a native stack on q's port (its ExecStart the FAKE vLLM as well), so
both kinds of unit meet at boot.

Setup: first run ~3 min (trixie debootstrap, cached); later ~25 s (boot, `podman import` of the
rootfs inside, wheel install). The tests: ~40 s.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from radiance.testing.systemd_box import Box, running_box

pytestmark = pytest.mark.integration

KEY = "sk-quadlet-test-31337"
PORT = 18090
INNER_IMAGE = "localhost/radiance-quadlet-inner:test"
OLD_IMAGE = "localhost/radiance-quadlet-inner:old"
UNIT = "radiance-q.service"
NATIVE = "radiance-n.service"
SYSTEM_ENV = {"RADIANCE_HOME": "/var/lib/radiance", "RADIANCE_CACHE": "/var/cache/radiance",
              "RADIANCE_STACKS": "/etc/radiance/stacks.yaml"}
# The image: the box's Debian with radiance, and a FAKE vLLM's distribution record (no vLLM here).
INNER_CONTAINERFILE = """\
FROM localhost/radiance-quadlet-inner:base
COPY site/ /usr/lib/python3/dist-packages/
"""
STACKS = f"""\
version: 1
stacks:
  q:
    description: a podman stack run by Quadlet (its server is the FAKE vLLM)
    arch: cpu
    runtime: podman
    image: {INNER_IMAGE}
    model: q-model
    served_name: q-model
    quant: paroquant
    chat_template: model
    port: {PORT}
    start_timeout_s: 60
    api_key_file: keys/q.key
    env:
      QUOTED_DOLLAR: 'cost $5 and ${{HOME}}'
      QUOTED_PERCENT: '50% of %h'
      QUOTED_MIX: 'a "b" \\c; d'
  n:
    description: a native stack on q's port (its server is the FAKE vLLM)
    arch: cpu
    model: n-model
    served_name: n-model
    quant: paroquant
    chat_template: model
    port: {PORT}
    start_timeout_s: 60
  old:
    description: a podman stack whose image's vLLM (FAKE, 0.20.0) is outside the tested range
    arch: cpu
    runtime: podman
    image: {OLD_IMAGE}
    model: q-model
    quant: paroquant
    chat_template: model
    port: {PORT}
  gone:
    description: a podman stack whose image was never built
    arch: cpu
    runtime: podman
    image: localhost/radiance-gone:1
    model: q-model
    quant: paroquant
    chat_template: model
    port: {PORT}
"""
QUOTED = {"QUOTED_DOLLAR": "cost $5 and ${HOME}", "QUOTED_PERCENT": "50% of %h", "QUOTED_MIX": 'a "b" \\c; d'}
FAKE_SERVER = f"""\
[Container]
Exec=/opt/radiance/bin/python3 -m radiance.testing.fake_vllm --port {PORT} --model q-model --load-s 1
Network=host
Volume=/opt/radiance:/opt/radiance:ro
Environment=PATH=/opt/radiance/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HealthCmd=radiance probe health --url http://127.0.0.1:{PORT} --timeout 2 --model q-model --api-key-env VLLM_API_KEY
HealthInterval=2s
HealthRetries=2
HealthStartPeriod=2s

[Service]
RestartSec=1
"""
SERVER_PROC = "^/opt/radiance/bin/python3 -m radiance.testing.fake_vllm"


def _build_inner(box: Box, tag: str, vllm_version: str) -> None:
    """No RUN step (the box's podman cannot raise RLIMIT_NOFILE for one): the files are laid out here
    with the box's own python, which is the image's."""
    site = "/tmp/inner/site"
    box.sh(f"rm -rf /tmp/inner && mkdir -p {site}/vllm-{vllm_version}.dist-info && "
           f"/opt/radiance/bin/pip install -q --no-deps --no-index --target {site} /wheels/*.whl && "
           f"printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: {vllm_version}\\n' "
           f"> {site}/vllm-{vllm_version}.dist-info/METADATA")
    box.write("/tmp/inner/Containerfile", INNER_CONTAINERFILE)
    box.sh(f"podman build --network=none -q -t {tag} /tmp/inner", timeout=300)


def _switch(box: Box, args: str, timeout: float = 120):
    return box.sh(f"vllm-switch {args}", check=False, timeout=timeout, env=SYSTEM_ENV)


def _active(box: Box) -> dict[str, str]:
    return {u: box.show(u)["ActiveState"] for u in (UNIT, NATIVE)}


def _ready(box: Box) -> str:
    return box.sh(f"radiance probe ready --url http://127.0.0.1:{PORT} --model q-model --timeout 5 "
                  f"--api-key-file /etc/radiance/keys/q.key", check=False).stdout


@pytest.fixture(scope="module")
def qbox(quadlet_image, radiance_wheel, tmp_path_factory):
    image, rootfs = quadlet_image
    storage = tmp_path_factory.mktemp("quadlet-storage")  # the inner podman's store, on the host's disk
    try:
        with running_box(image, "--privileged", "--network=none", "-v", f"{storage}:/var/lib/containers",
                         "-v", f"{rootfs}:/rootfs.tar:ro", "-v", f"{radiance_wheel.parent}:/wheels:ro",
                         prefix="radiance-quadlet", cgroupns="host") as box:
            box.sh("podman import --quiet /rootfs.tar localhost/radiance-quadlet-inner:base", timeout=300)
            _build_inner(box, INNER_IMAGE, "0.32.0")
            _build_inner(box, OLD_IMAGE, "0.20.0")
            box.sh(f"/opt/radiance/bin/pip install -q --no-deps --no-index /wheels/{radiance_wheel.name}")
            box.write("/etc/radiance/stacks.yaml", STACKS)
            box.write("/etc/radiance/keys/q.key", KEY + "\n")
            box.sh("chmod 600 /etc/radiance/keys/q.key")
            box.checkpoints("/var/lib/radiance/models", "q-model", "n-model")
            box.service_user()  # the native stack `n` runs as `radiance`
            box.drop_in(NATIVE, "[Service]\nExecStart=\nExecStart=/opt/radiance/bin/python3 -m radiance.testing.fake_vllm "
                        f"--port {PORT} --model n-model --load-s 1\n", name="10-fake-server.conf")
            r = box.sh("radiance render --system --out /etc/systemd/system --launcher /opt/radiance/bin/radiance-launch")
            assert "wrote  /etc/containers/systemd/radiance-q.container" in r.stdout, r.stdout  # auto: podman 5
            box.write("/etc/containers/systemd/radiance-q.container.d/10-fake-server.conf", FAKE_SERVER)
            box.sh("systemctl daemon-reload")
            yield box
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def test_the_generator_reads_the_rendered_file(qbox):
    gen = qbox.sh("/usr/libexec/podman/quadlet -dryrun 2>&1").stdout
    run = next(line for line in gen.splitlines()
               if line.startswith("ExecStart=/usr/bin/podman run") and "--name radiance-q " in line)
    for arg in ("--init", "--cap-drop all", "--security-opt=no-new-privileges", "--user 10001:10001",
                "--health-on-failure kill", "--secret radiance-q-api-key,type=env,target=VLLM_API_KEY",
                "/var/lib/radiance/models/q-model:/var/lib/radiance/models/q-model:ro,z",
                "/var/cache/radiance/stacks/q/kernels:/var/cache/radiance/stacks/q/kernels:rw,Z",
                "--cgroups=split", "--sdnotify=conmon"):
        assert arg in run, arg
    assert "radiance.testing.fake_vllm" in run  # the test drop-in was merged
    st = qbox.show(UNIT, "SourcePath", "FragmentPath", "LoadState", "StartLimitBurst", "RestartPreventExitStatus")
    assert st["SourcePath"] == "/etc/containers/systemd/radiance-q.container" and st["LoadState"] == "loaded", st
    assert st["FragmentPath"].startswith("/run/systemd/generator/"), st
    assert st["StartLimitBurst"] == "3" and st["RestartPreventExitStatus"] == "2", st
    assert qbox.sh("test -e /etc/systemd/system/radiance-q.service", check=False).returncode == 1


def test_started_means_ready_and_the_key_stays_secret(qbox):
    t = time.monotonic()
    r = qbox.sh(f"systemctl start {UNIT}", check=False, timeout=150)
    assert r.returncode == 0, r.stderr + qbox.journal(UNIT, 60)
    assert qbox.show(UNIT)["ActiveState"] == "active"
    assert "ready: 'q-model' answered" in _ready(qbox), f"started but not ready (after {time.monotonic() - t:.0f} s)"
    assert qbox.sh("test -f /var/lib/radiance/state/ready/q.json", check=False).returncode == 0  # ExecStartPost's record
    no_key = qbox.sh(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{PORT}/v1/models").stdout
    assert no_key == "401", "the container's server must have the key (podman secret -> VLLM_API_KEY)"
    env = json.loads(qbox.sh("podman inspect radiance-q --format '{{json .Config.Env}}'").stdout)
    for k, v in QUOTED.items():  # the stack file's values, through Quadlet and podman, exactly
        assert f"{k}={v}" in env, (k, [e for e in env if e.startswith(k)])
    user = qbox.sh(f"ps -o user= -p $(pgrep -f '{SERVER_PROC}')").stdout.strip()
    assert user == "10001", user
    for where, cmd in {"systemctl show": f"systemctl show {UNIT}", "ps": "ps -eo args",
                       "podman inspect": "podman inspect radiance-q", "journal": f"journalctl -u {UNIT} --no-pager",
                       "unit file": "cat /etc/containers/systemd/radiance-q.container"}.items():
        assert KEY not in qbox.sh(cmd).stdout, f"the API key shows in {where}"


def test_kill_9_is_restarted_and_ready_again(qbox):
    if qbox.show(UNIT)["ActiveState"] != "active":
        qbox.sh(f"systemctl start {UNIT}", timeout=150)
    before = int(qbox.show(UNIT)["NRestarts"])
    qbox.sh(f"kill -9 $(pgrep -f '{SERVER_PROC}')")
    st = qbox.wait_unit(UNIT, lambda s: int(s["NRestarts"]) > before and s["ActiveState"] == "active", 90,
                        what="restart after kill -9")
    assert st["SubState"] == "running"
    assert "ready:" in _ready(qbox)
    assert "status=137" in qbox.journal(UNIT)


def test_a_hung_container_is_killed_and_restarted(qbox):
    qbox.sh(f"systemctl reset-failed {UNIT}; systemctl is-active {UNIT} || systemctl start {UNIT}", timeout=150)
    before = int(qbox.show(UNIT)["NRestarts"])
    qbox.sh(f"kill -STOP $(pgrep -f '{SERVER_PROC}')")  # alive, port open, never answers
    qbox.wait_unit(UNIT, lambda s: int(s["NRestarts"]) > before and s["ActiveState"] == "active", 120,
                   what="health check -> kill -> restart")
    assert "ready:" in _ready(qbox)


def test_an_image_missing_or_outside_the_vllm_range_is_refused_before_anything_stops(qbox):
    r = _switch(qbox, "n --timeout 90", 200)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _switch(qbox, "old --timeout 60")
    assert r.returncode == 4, r.stdout + r.stderr
    assert (f"old: its image {OLD_IMAGE} cannot serve it: the image {OLD_IMAGE} has vLLM 0.20.0, but radiance"
            in r.stderr and "is tested with vllm >=0.26,<0.33" in r.stderr), r.stderr
    r = _switch(qbox, "gone --timeout 60")
    assert r.returncode == 4 and "gone: its image localhost/radiance-gone:1 is not in podman's store" in r.stderr, \
        r.stdout + r.stderr
    assert _active(qbox)[NATIVE] == "active"  # nothing was stopped


def test_a_reboot_brings_back_exactly_what_vllm_switch_left_running(qbox):
    """Last in this module: it reboots the box. Before, Quadlet enabled every .container's
    [Install] section, so each reboot started q whatever the operator had chosen."""
    assert _switch(qbox, "stop").returncode == 0
    wants = qbox.sh("systemctl show -p Wants --value multi-user.target").stdout.split()
    assert UNIT not in wants and NATIVE not in wants, wants
    for chosen, other in ((NATIVE, UNIT), (UNIT, NATIVE), (NATIVE, UNIT)):
        r = _switch(qbox, f"{chosen.removeprefix('radiance-').removesuffix('.service')} --timeout 90", 200)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"at boot: {chosen} will be started" in r.stdout, r.stdout
        qbox.reboot()
        st = _active(qbox)
        assert st == {chosen: "active", other: "inactive"}, (chosen, st, qbox.journal(other, 30))
    r = _switch(qbox, "stop")
    assert r.returncode == 0 and "at boot: no radiance stack will be started" in r.stdout, r.stdout + r.stderr
    qbox.reboot()
    assert _active(qbox) == {UNIT: "inactive", NATIVE: "inactive"}
