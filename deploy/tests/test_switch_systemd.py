"""vllm-switch against real systemd (PID 1 in a podman container) with three native test stacks.

Setup cost: first run ~2 min (debootstrap base ~90 s + deps layer ~20 s, both cached in
$RADIANCE_HOME/images and podman's store); later runs ~15 s (radiance wheel build + container boot
+ pip install of the wheel). The tests themselves take ~60-75 s (a 3 s port hold, short timeouts;
on the 2-core machine under load).

The stacks' units are rendered by `radiance render` from a stack file, installed, and their
ExecStart is swapped by a systemd drop-in for `radiance.testing.fake_vllm` (a FAKE vLLM: three
real vLLM servers cannot run here): `alpha` and `beta` share port 18080, `gamma` has 18081.
alpha holds its port 3 s after SIGTERM and generates a token every 50 ms; gamma never becomes ready.
Their checkpoints are shape-only (zero weights, a bundled chat template): vllm-switch checks the
target's launch plan before it stops anything.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from radiance.testing.systemd_box import Box, running_box

pytestmark = pytest.mark.integration

STACKS = """\
version: 1
stacks:
  alpha:
    description: test stack, holds its port 3 s after SIGTERM
    arch: cpu
    model: alpha-model
    served_name: alpha-model  # what the fake lists; the probe asks for it
    quant: paroquant
    chat_template: model
    port: 18080
  beta:
    description: test stack sharing alpha's port
    arch: cpu
    model: beta-model
    served_name: beta-model  # what the fake lists; the probe asks for it
    quant: paroquant
    chat_template: model
    port: 18080
  gamma:
    description: test stack on its own port, never ready
    arch: cpu
    model: gamma-model
    served_name: gamma-model  # what the fake lists; the probe asks for it
    quant: paroquant
    chat_template: model
    port: 18081
"""
PORTS = {"alpha": 18080, "beta": 18080, "gamma": 18081}
DEFAULT_VARIANT = {"alpha": "--hold-after-term 3 --token-s 0.05", "beta": "", "gamma": "--never-ready"}
MODELS = "/root/.cache/radiance/models"
COMPLETION = ("curl -s -X POST localhost:18080/v1/completions -H 'Content-Type: application/json' "
              "-d '{{\"model\": \"alpha-model\", \"prompt\": \"1\", \"max_tokens\": {tokens}}}'")


class SwitchBox(Box):
    def switch(self, args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.sh(f"vllm-switch {args}", check=False, timeout=timeout)

    def active(self) -> dict[str, str]:
        out = self.sh("for s in alpha beta gamma; do echo $s $(systemctl is-active radiance-$s.service); done",
                      check=False).stdout
        return dict(line.split() for line in out.splitlines())

    def set_server(self, stack: str, variant: str) -> None:
        """Swap the unit's ExecStart (a drop-in) for the fake server with this variant's flags."""
        self.drop_in(f"radiance-{stack}.service", "[Service]\nExecStart=\nExecStart=/opt/radiance/bin/python3 -m "
                     f"radiance.testing.fake_vllm --port {PORTS[stack]} --model {stack}-model --load-s 0.5 {variant}\n",
                     name="10-fake-server.conf")


@pytest.fixture(scope="module")
def box(systemd_image, radiance_wheel):
    with running_box(systemd_image, "--network=none", "-v", f"{radiance_wheel.parent}:/wheels:ro",
                     prefix="radiance-systemd") as b:
        b = SwitchBox(b.name)
        b.sh(f"/opt/radiance/bin/pip install -q --no-deps --no-index /wheels/{radiance_wheel.name}")
        b.write("/root/.cache/radiance/stacks.yaml", STACKS)
        b.checkpoints(MODELS, "alpha-model", "beta-model", "gamma-model")
        r = b.sh("radiance render --out /etc/systemd/system --launcher /opt/radiance/bin/radiance-launch")
        assert "wrote  /etc/systemd/system/radiance-alpha.service" in r.stdout
        for stack, variant in DEFAULT_VARIANT.items():
            b.set_server(stack, variant)
        yield b


@pytest.fixture(autouse=True)
def _clean(box):
    yield
    box.sh("systemctl stop radiance-alpha radiance-beta radiance-gamma; "
           "systemctl reset-failed 'radiance-*' || true", check=False)
    for stack, variant in DEFAULT_VARIANT.items():
        box.set_server(stack, variant)


def test_rendered_units_carry_conflicts_and_timeouts(box):
    unit = box.sh("systemctl cat radiance-beta.service").stdout
    assert "Conflicts=radiance-alpha.service" in unit
    assert "After=radiance-alpha.service" in unit  # stop-before-start ordering
    assert "TimeoutStartSec=1860" in unit and "Restart=on-failure" in unit and "KillMode=mixed" in unit
    assert "RestartPreventExitStatus=2" in unit and "StartLimitBurst=3" in unit
    assert "ExecStartPost=+/opt/radiance/bin/radiance probe ready --url http://127.0.0.1:18080" in unit
    assert "Conflicts" not in box.sh("systemctl cat radiance-gamma.service").stdout.split("[Service]")[0]
    box.sh("systemd-analyze verify /etc/systemd/system/radiance-alpha.service")


def test_switch_waits_for_port_and_serves(box):
    r = box.switch("alpha --timeout 30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.active()["alpha"] == "active"
    dry = box.switch("beta --dry-run")
    assert dry.returncode == 0 and "stop radiance-alpha.service (shares port 18080)" in dry.stdout, dry.stdout
    assert box.active()["alpha"] == "active"  # a dry run changes nothing
    t = time.monotonic()
    r = box.switch("beta --timeout 30")
    took = time.monotonic() - t
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopping radiance-alpha.service" in r.stdout
    assert took >= 3.0, f"alpha holds its port 3 s after SIGTERM; the switch returned after {took:.1f}s"
    assert box.active() == {"alpha": "inactive", "beta": "active", "gamma": "inactive"}
    # It really answers, through a real completion.
    out = box.sh("curl -s -X POST localhost:18080/v1/completions -H 'Content-Type: application/json' "
                 "-d '{\"model\": \"beta-model\", \"prompt\": \"1\", \"max_tokens\": 1}'").stdout
    assert '"text"' in out
    st = box.switch("status")
    assert st.returncode == 0 and "beta" in st.stdout and "yes" in st.stdout and "18080" in st.stdout, st.stdout
    # A second switch to the active stack does nothing but confirm readiness.
    r = box.switch("beta --timeout 30")
    assert r.returncode == 0 and "already active" in r.stdout, r.stdout
    rec = box.sh("cat /root/.cache/radiance/state/switch/*-beta.json").stdout
    assert '"outcome": "ok"' in rec and '"from": "alpha"' in rec


def test_never_ready_times_out_with_journal(box):
    r = box.switch("gamma --timeout 17")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not ready within 17s" in r.stdout + r.stderr
    # a long wait says what it waits for (the first progress line comes after 15 s)
    assert "still waiting for gamma: radiance-gamma.service activating (start-post); last probe: not ready:" in r.stdout
    assert "last journal lines of radiance-gamma.service" in r.stdout
    assert "fake_vllm[gamma-model]" in r.stdout  # the journal tail is the unit's own output
    assert box.active()["gamma"] == "inactive"  # a failed stack does not keep holding the GPUs


def test_failed_switch_rolls_back(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    box.set_server("beta", "--never-ready")
    r = box.switch("beta --timeout 4")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rolled_back" in r.stderr and "rolling back to alpha" in r.stdout, r.stdout + r.stderr
    assert box.active() == {"alpha": "active", "beta": "inactive", "gamma": "inactive"}
    r = box.switch("beta --timeout 3 --no-rollback")
    assert r.returncode == 1 and "rolling back" not in r.stdout
    assert box.active()["alpha"] == "inactive"


def test_refuses_a_stack_whose_unit_is_not_installed(box):
    box.sh("cp /root/.cache/radiance/stacks.yaml /tmp/more.yaml && cat >> /tmp/more.yaml <<'EOF'\n"
           "  delta:\n    arch: cpu\n    model: d\n    quant: paroquant\n    port: 18082\nEOF")
    r = box.switch("delta --stacks /tmp/more.yaml")
    assert r.returncode == 4 and "radiance-delta.service is not-found in systemd" in r.stderr, r.stdout + r.stderr


def test_refuses_a_strangers_port(box):
    box.sh("nohup python3 -m http.server 18081 --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > /tmp/stranger.pid")
    try:
        pid = box.sh("cat /tmp/stranger.pid").stdout.strip()
        deadline = time.monotonic() + 10
        while box.sh("ss -ltn | grep -q ':18081 '", check=False).returncode != 0:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        dry = box.switch("gamma --dry-run")
        assert "would REFUSE" in dry.stdout
        r = box.switch("gamma --timeout 5")
        assert r.returncode == 4, r.stdout + r.stderr
        assert f"PID {pid} (python3)" in r.stderr and "not a radiance stack" in r.stderr
        assert box.sh(f"kill -0 {pid}", check=False).returncode == 0, "the stranger must not be killed"
    finally:
        box.sh("kill $(cat /tmp/stranger.pid)", check=False)


def test_concurrent_switches_are_serialized(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    first = subprocess.Popen(["podman", "exec", box.name, "vllm-switch", "beta", "--timeout", "30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # alpha's 3 s port hold keeps the first switch inside its lock
        busy = box.switch("alpha --timeout 30")
        assert busy.returncode == 3, busy.stdout + busy.stderr
        assert "another vllm-switch is running" in busy.stderr
        queued = box.switch("alpha --timeout 30 --lock-wait 60")
        assert queued.returncode == 0, queued.stdout + queued.stderr
    finally:
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert box.active() == {"alpha": "active", "beta": "inactive", "gamma": "inactive"}


def test_kill_9_mid_switch_converges(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    box.sh("(vllm-switch beta --timeout 30 > /tmp/sw.log 2>&1 & echo $! > /tmp/sw.pid)")
    deadline = time.monotonic() + 15
    while "stopping radiance-alpha" not in box.sh("cat /tmp/sw.log", check=False).stdout:
        assert time.monotonic() < deadline, box.sh("cat /tmp/sw.log", check=False).stdout
        time.sleep(0.1)
    box.sh("kill -9 $(cat /tmp/sw.pid)")
    r = box.switch("beta --timeout 30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.active() == {"alpha": "inactive", "beta": "active", "gamma": "inactive"}
    stop = box.switch("stop")
    assert stop.returncode == 0 and "stopping radiance-beta.service" in stop.stdout, stop.stdout + stop.stderr
    assert set(box.active().values()) == {"inactive"}


def test_setup_installs_units_reloads_systemd_and_is_idempotent(box):
    models = MODELS
    # well-formed paroquant checkpoints (zero weights): setup checks their structure, then SHA256SUMS
    box.sh(f"mkdir -p {models} && cd {models} && python3 -c 'import sys; from pathlib import Path; "
           "from radiance.testing.shape_only import write_zero_checkpoint as w; "
           "[w(Path(m), \"paroquant\") for m in sys.argv[1:]]' alpha-model beta-model gamma-model && "
           f"for m in alpha-model beta-model gamma-model; do (cd {models}/$m && sha256sum config.json > SHA256SUMS); done")
    box.sh("rm /etc/systemd/system/radiance-gamma.service && systemctl daemon-reload")
    assert box.active()["gamma"] == "inactive"
    first = box.sh("radiance setup --skip-images", check=False)
    out = " ".join(first.stdout.replace("│", " ").split())  # the table's cells, unwrapped
    assert first.returncode == 0, first.stdout + first.stderr
    assert "wrote radiance-gamma.service" in out and "systemctl daemon-reload" in out
    assert "systemd is PID 1" in out and "1 files match SHA256SUMS" in out
    assert box.sh("systemctl show -p LoadState --value radiance-gamma.service").stdout.strip() == "loaded"
    second = box.sh("radiance setup --skip-images", check=False)
    assert second.returncode == 0 and "nothing changed: this host was already set up" in second.stdout, second.stdout


def _request(box: Box, tokens: int) -> None:
    """A completion of `tokens` tokens to alpha (50 ms each), in the background; its answer in /tmp/req.json."""
    box.sh(f"rm -f /tmp/req.json; ({COMPLETION.format(tokens=tokens)} > /tmp/req.json; echo $? > /tmp/req.rc) "
           "> /dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    running = 'vllm:num_requests_running{engine="0",model_name="alpha-model"} 1'
    while running not in (m := box.sh("curl -s localhost:18080/metrics").stdout):
        assert time.monotonic() < deadline, m
        time.sleep(0.1)


def test_a_switch_lets_running_requests_finish_and_says_so(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    _request(box, 100)  # 5 s of generation
    r = box.switch("beta --timeout 30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "waiting for requests to finish before stopping: alpha: 1 request(s) running, 0 waiting" in r.stdout
    answer = box.sh("cat /tmp/req.json").stdout
    assert '"completion_tokens": 100' in answer, f"the request was cut by the switch: {answer!r}"


def test_requests_outlasting_the_drain_bound_refuse_the_switch_and_force_does_not_wait(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    _request(box, 600)  # 30 s of generation
    r = box.switch("beta --timeout 30 --drain-timeout 2")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "alpha still serve requests after 2 s; nothing was stopped" in r.stderr, r.stderr
    assert box.active()["alpha"] == "active"
    t = time.monotonic()
    r = box.switch("beta --timeout 30 --force")
    assert r.returncode == 0 and "--force: not waiting for requests on alpha" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - t < 20
    assert box.active()["beta"] == "active"


def test_a_target_that_cannot_start_is_refused_before_anything_stops(box):
    assert box.switch("alpha --timeout 30").returncode == 0
    box.sh(f"mv {MODELS}/beta-model {MODELS}/beta-model.away")
    try:
        r = box.switch("beta --timeout 30")
        assert r.returncode == 4, r.stdout + r.stderr
        assert f"beta: its launch would fail:" in r.stderr and f"model dir {MODELS}/beta-model does not exist" in r.stderr
        assert "stopping" not in r.stdout
        assert box.active()["alpha"] == "active"  # the working stack still serves
    finally:
        box.sh(f"mv {MODELS}/beta-model.away {MODELS}/beta-model")


def test_switch_records_stay_bounded_and_the_exporter_still_counts_them_all(box):
    root = "/root/.cache/radiance/state"
    box.sh(f"rm -rf {root}/switch {root}/switch_totals && python3 -c 'from pathlib import Path; from radiance import "
           f"state; [state.record_switch(None, \"beta\", \"ok\", 2.0, at=1000.0 + i, root=Path(\"{root}\")) "
           "for i in range(1000)]'")
    assert box.switch("alpha --timeout 30").returncode == 0
    files = int(box.sh(f"ls {root}/switch/*.json | wc -l").stdout)
    assert files == 200, f"{files} switch records kept"
    text = box.exporter_metrics(19411, "radiance_switches_total", "--interval 60")
    counted = sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("radiance_switches_total{"))
    assert counted == 1001.0, counted
