"""What the rendered native units do when a stack is slow, never ready, misconfigured, crash-looping
or hung — against real systemd (PID 1 in a podman container), with the real launcher where the
fault is the launcher's, and the exporter reading the real units.

Stacks (rendered by `radiance render`, unchanged except where a test says):
    ok      FAKE vLLM server (drop-in; radiance/testing/fake_vllm.py), ready 2 s after start
    twin    shares ok's port, never started: the exporter must not report it up
    never   FAKE vLLM that never answers a completion
    badcfg  the real radiance-launch; its model directory does not exist (exit 2)
    crash   the real radiance-launch; its model exists but vLLM does not (this box has none): exit 1
    quoted  FAKE vLLM; its `env:` values hold every character systemd would otherwise interpret

Drop-ins shorten RestartSec to 1 s and the watchdog to a probe every second, 2 misses: the
rendered values (15 s, 30 s x 3) would make these tests minutes long; what is tested is the
behaviour. Setup ~15 s once the systemd image is cached; the tests ~60 s.
"""

from __future__ import annotations

import time

import pytest

from radiance.testing.systemd_box import Box, running_box

pytestmark = pytest.mark.integration

STACKS = """\
version: 1
stacks:
  ok:
    arch: cpu
    model: ok-model
    served_name: ok-model
    quant: paroquant
    port: 18180
    start_timeout_s: 30
  twin:
    arch: cpu
    model: twin-model
    served_name: twin-model
    quant: paroquant
    port: 18180
  never:
    arch: cpu
    model: never-model
    served_name: never-model
    quant: paroquant
    port: 18181
    start_timeout_s: 10
  badcfg:
    arch: cpu
    model: no-such-model
    quant: paroquant
    port: 18182
  crash:
    arch: cpu
    model: crash-model
    quant: paroquant
    chat_template: model
    port: 18183
  quoted:
    arch: cpu
    model: quoted-model
    served_name: quoted-model
    quant: paroquant
    port: 18184
    env:
      QUOTED_DOLLAR: 'cost $5 and ${HOME}'
      QUOTED_PERCENT: '50% of %h'
      QUOTED_MIX: 'a "b" \\c; d'
"""
QUOTED = {"QUOTED_DOLLAR": "cost $5 and ${HOME}", "QUOTED_PERCENT": "50% of %h", "QUOTED_MIX": 'a "b" \\c; d'}
INJECT = """\
version: 1
stacks:
  inject:
    arch: cpu
    model: m
    quant: paroquant
    port: 18185
    env:
      X: "a\\nExecStartPre=/bin/touch /tmp/pwned"
"""
FAST_RESTART = "[Service]\nRestartSec=1\n"
FAST_WATCHDOG = ("[Service]\nExecStart=\nExecStart=/opt/radiance/bin/radiance probe watch --stacks "
                 "/root/.cache/radiance/stacks.yaml --stack %i --interval 1 --timeout 1 --retries 2\n")


def _fake(box: Box, stack: str, port: int, flags: str) -> None:
    box.drop_in(f"radiance-{stack}.service", "[Service]\nExecStart=\nExecStart=/opt/radiance/bin/python3 -m "
                f"radiance.testing.fake_vllm --port {port} --model {stack}-model {flags}\n", name="10-fake-server.conf")


@pytest.fixture(scope="module")
def box(systemd_image, radiance_wheel):
    with running_box(systemd_image, "--network=none", "-v", f"{radiance_wheel.parent}:/wheels:ro",
                     prefix="radiance-faults") as b:
        b.sh(f"/opt/radiance/bin/pip install -q --no-deps --no-index /wheels/{radiance_wheel.name}")
        b.write("/root/.cache/radiance/stacks.yaml", STACKS)
        b.write("/root/.cache/radiance/models/crash-model/config.json",
                '{"model_type": "qwen2", "quantization_config": {"quant_method": "paroquant", "bits": 4, '
                '"group_size": 128}}\n')
        b.write("/root/.cache/radiance/models/crash-model/chat_template.jinja", "{{ messages }}\n")
        b.sh("radiance render --out /etc/systemd/system --launcher /opt/radiance/bin/radiance-launch")
        _fake(b, "ok", 18180, "--load-s 2")
        _fake(b, "twin", 18180, "")
        _fake(b, "never", 18181, "--never-ready")
        _fake(b, "quoted", 18184, "")
        for stack in ("ok", "crash", "badcfg"):
            b.drop_in(f"radiance-{stack}.service", FAST_RESTART, name="20-fast-restart.conf")
        b.drop_in("radiance-watchdog@.service", FAST_WATCHDOG, name="20-fast.conf")
        yield b


def _ready(box: Box, port: int, model: str) -> str:
    return box.sh(f"radiance probe ready --url http://127.0.0.1:{port} --model {model} --timeout 3", check=False).stdout


def test_start_waits_for_ready_and_fails_when_never_ready(box):
    t = time.monotonic()
    box.sh("systemctl start radiance-ok.service", timeout=90)
    assert time.monotonic() - t >= 2.0, "`systemctl start` returned before the server could answer"
    assert _ready(box, 18180, "ok-model").startswith("ready:")  # at once: started means ready
    assert box.sh("cat /root/.cache/radiance/state/ready/ok.json").stdout.count('"stack": "ok"') == 1

    r = box.sh("systemctl start radiance-never.service", check=False, timeout=120)
    try:
        assert r.returncode != 0, "a stack that never answers must fail its start"
        journal = box.journal("radiance-never.service")
        assert "startup window of 10s ran out" in journal and "answered 503" in journal, journal[-2000:]
    finally:
        box.sh("systemctl stop radiance-never.service; systemctl reset-failed radiance-never.service", check=False)


def test_configuration_error_is_not_restarted(box):
    box.sh("systemctl start radiance-badcfg.service", check=False, timeout=60)
    st = box.wait_unit("radiance-badcfg.service", lambda s: s["ActiveState"] == "failed", 60, what="failed")
    time.sleep(3)  # with RestartSec=1, a restart would have come within these 3 s
    st = box.show("radiance-badcfg.service", "ExecMainStatus")
    assert st["NRestarts"] == "0" and st["SubState"] == "failed" and st["ExecMainStatus"] == "2", st
    journal = box.journal("radiance-badcfg.service")
    assert "radiance-launch: error:" in journal and "no-such-model" in journal, journal[-2000:]


def test_crash_loop_stops_at_the_start_limit(box):
    box.sh("systemctl start radiance-crash.service", check=False, timeout=60)
    deadline = time.monotonic() + 120
    while "Start request repeated too quickly" not in (journal := box.journal("radiance-crash.service")):
        assert time.monotonic() < deadline, f"no start limit within 120 s:\n{journal[-3000:]}"
        time.sleep(1)
    st = box.show("radiance-crash.service", "StartLimitBurst")
    time.sleep(3)  # with RestartSec=1 another restart would come within these 3 s
    again = box.show("radiance-crash.service")
    assert again["ActiveState"] == "failed" and again["NRestarts"] == st["NRestarts"], (st, again)
    assert int(st["NRestarts"]) < int(st["StartLimitBurst"]) == 3, st  # bounded: systemd gave up
    assert "radiance-launch: error: vLLM is not installed" in journal  # the launcher's one-line reason
    assert "exited before it was ready" in journal  # the ready probe did not wait out its window
    box.sh("systemctl reset-failed radiance-crash.service")


def test_watchdog_restarts_a_native_stack_that_stops_answering(box):
    box.sh("systemctl reset-failed radiance-ok.service; systemctl start radiance-ok.service", timeout=90)
    box.wait_unit("radiance-watchdog@ok.service", lambda s: s["ActiveState"] == "active", 30, what="watchdog up")
    before = int(box.show("radiance-ok.service")["NRestarts"])
    pid = box.show("radiance-ok.service", "MainPID")["MainPID"]
    box.sh(f"kill -STOP {pid}")  # alive, port open, never answers
    box.wait_unit("radiance-ok.service", lambda s: int(s["NRestarts"]) > before and s["ActiveState"] == "active", 60,
                  what="watchdog kill -> restart -> ready")
    assert _ready(box, 18180, "ok-model").startswith("ready:")
    log = box.journal("radiance-watchdog@ok.service")
    assert "failed 2 health probes in a row: SIGKILL" in log, log[-2000:]


def test_exporter_reads_units_from_systemd(box):
    box.sh("systemctl is-active radiance-ok.service || systemctl start radiance-ok.service", timeout=90)
    text = box.exporter_metrics(19410, 'radiance_up{stack="twin"}', "--interval 0.5 --probe-timeout 3")
    # ok and twin share port 18180; only ok's unit runs, so only ok is probed and up
    for line in ('radiance_up{stack="ok"} 1.0', 'radiance_ready{stack="ok"} 1.0', 'radiance_active{stack="ok"} 1.0',
                 'radiance_up{stack="twin"} 0.0', 'radiance_ready{stack="twin"} 0.0',
                 'radiance_active{stack="twin"} 0.0'):
        assert line in text, line
    info = next(line for line in text.splitlines() if line.startswith('radiance_stack_info{') and 'stack="twin"' in line)
    assert 'port="18180"' in info and 'unit="radiance-twin.service"' in info and 'runtime="native"' in info


def test_stack_file_values_reach_the_unit_exactly_and_a_newline_never(box):
    box.sh("systemctl start radiance-quoted.service", timeout=60)
    try:
        pid = box.show("radiance-quoted.service", "MainPID")["MainPID"]
        env = box.sh(f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()
        for k, v in QUOTED.items():
            assert f"{k}={v}" in env, (k, [e for e in env if e.startswith(k)])
    finally:
        box.sh("systemctl stop radiance-quoted.service", check=False)
    # A newline in a value would add a unit line run as root: the file is refused, nothing is written.
    box.write("/root/inject.yaml", INJECT)
    r = box.sh("radiance render --stacks /root/inject.yaml --out /run/systemd/system "
               "--launcher /opt/radiance/bin/radiance-launch", check=False)
    box.sh("systemctl daemon-reload; systemctl start radiance-inject.service", check=False, timeout=60)
    assert box.sh("test -e /tmp/pwned", check=False).returncode == 1, "the stack file's newline ran as a unit line"
    assert r.returncode == 2 and "inject.yaml:9: stacks.inject.env.X: contains a control character" in r.stderr, r.stderr
