"""The exporter's metrics from real probes of small HTTP servers and real state files."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from radiance.healthchecks import exporter
from radiance import state
from radiance.testing.tools import require

STACKS_YAML = """\
version: 1
stacks:
  demo:
    arch: cpu
    model: qwen-paroquant
    quant: paroquant
    served_name: demo
    port: {demo_port}
  paro:
    arch: sm_86
    model: big-paro
    quant: paroquant
    served_name: qwen
    devices: [0, 1]
    tp: 2
    port: {paro_port}
  pq2:
    arch: sm_86
    model: big-pq2
    quant: pq2
    devices: [2]
    port: {pq2_port}
"""


def _samples(registry) -> dict[tuple[str, frozenset], float]:
    text = generate_latest(registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples, name, **labels) -> float:
    matches = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, f"{name}{labels}: {len(matches)} samples"
    return matches[0]


@pytest.fixture
def stacks(tmp_path, openai_server, free_port):
    demo = openai_server(models=["demo"])  # ready
    paro = openai_server(health=503)  # starting
    pq2_port = free_port()  # down
    f = tmp_path / "stacks.yaml"
    f.write_text(STACKS_YAML.format(demo_port=demo.port, paro_port=paro.port, pq2_port=pq2_port))
    return f, demo, paro


def test_stack_health_labels_and_probe_latency(stacks, tmp_path):
    f, demo, paro = stacks
    targets = exporter.targets_from_stacks(f)
    assert [(t.name, t.gpus, t.model) for t in targets] == [("demo", "none", "demo"), ("paro", "0,1", "qwen"),
                                                             ("pq2", "2", "pq2")]
    registry, prober = exporter.build(targets, probe_timeout_s=3, state_root=tmp_path / "state")

    before = _samples(registry)
    assert not [k for k in before if k[0] in ("radiance_up", "radiance_ready")], "no guess before the first probe"

    prober.round()
    s = _samples(registry)
    assert _value(s, "radiance_stack_info", stack="demo", port=str(demo.port), gpus="none", model="demo",
                  unit="radiance-demo.service", runtime="native", arch="cpu", quant="paroquant", image="") == 1
    assert _value(s, "radiance_stack_info", stack="paro", gpus="0,1", model="qwen", arch="sm_86") == 1
    assert _value(s, "radiance_up", stack="demo") == 1
    assert [dict(ls) for (n, ls) in s if n == "radiance_up" and ("stack", "demo") in ls] == [{"stack": "demo"}], \
        "descriptive labels live on radiance_stack_info only"
    assert _value(s, "radiance_ready", stack="demo") == 1
    assert _value(s, "radiance_up", stack="paro") == 0
    assert _value(s, "radiance_ready", stack="paro") == 0
    assert _value(s, "radiance_up", stack="pq2") == 0
    assert _value(s, "radiance_probe_latency_seconds_count", stack="demo", probe="ready") == 1
    assert _value(s, "radiance_probe_latency_seconds_count", stack="paro", probe="live") == 1
    assert not [k for k in s if k[0] == "radiance_probe_latency_seconds_count" and ("stack", "paro") in k[1]
                and ("probe", "ready") in k[1]], "a stack that is not live gets no ready probe"

    paro.behaviour.health = 200
    paro.behaviour.models = ["qwen"]
    prober.round()
    s = _samples(registry)
    assert _value(s, "radiance_ready", stack="paro") == 1
    assert _value(s, "radiance_probe_latency_seconds_count", stack="demo", probe="ready") == 2


def test_without_systemd_every_stack_is_probed_and_active_is_not_guessed(stacks, tmp_path, caplog):
    """On this machine systemd is not PID 1: nothing says which unit runs, so radiance_active is not
    exported (the systemd box tests read it from real units: deploy/tests/test_unit_faults.py)."""
    f, demo, _ = stacks
    require(exporter.systemd_states(exporter.targets_from_stacks(f)) is None, "systemd is PID 1 here")
    registry, prober = exporter.build(exporter.targets_from_stacks(f), probe_timeout_s=3, state_root=tmp_path)
    with caplog.at_level(logging.INFO, logger="radiance.exporter"):
        prober.round()
    s = _samples(registry)
    assert not [k for k in s if k[0] == "radiance_active"]
    assert _value(s, "radiance_ready", stack="demo") == 1
    assert any("systemd is not PID 1 here" in r.message for r in caplog.records)


def test_switch_metrics_from_state_files(stacks, tmp_path):
    f, *_ = stacks
    root = tmp_path / "state"
    registry, _ = exporter.build(exporter.targets_from_stacks(f), state_root=root)
    s = _samples(registry)
    assert _value(s, "radiance_switches_total", to="paro", outcome="ok") == 0, "zeros exist before any switch"

    state.record_switch(None, "demo", "ok", 42.0, at=1000.0, root=root)
    state.record_switch("demo", "paro", "timeout", 650.0, at=2000.0, root=root)
    state.record_switch("paro", "pq2", "rolled_back", 700.0, at=3000.0, root=root)
    state.record_switch("paro", "demo", "refused", 0.2, at=4000.0, root=root)
    s = _samples(registry)
    assert _value(s, "radiance_switches_total", to="demo", outcome="ok") == 1
    assert _value(s, "radiance_switches_total", to="pq2", outcome="rolled_back") == 1
    assert _value(s, "radiance_switches_total", to="demo", outcome="refused") == 1
    state.record_switch("paro", "demo", "timeout", 900.0, at=5000.0, root=root)
    state.record_switch(None, "demo", "ok", 50.0, at=6000.0, root=root)
    s = _samples(registry)
    assert _value(s, "radiance_switch_duration_seconds_count", outcome="timeout") == 2
    assert _value(s, "radiance_switch_duration_seconds_bucket", outcome="timeout", le="600.0") == 0
    assert _value(s, "radiance_switch_duration_seconds_bucket", outcome="timeout", le="1200.0") == 2
    assert _value(s, "radiance_switch_duration_seconds_sum", outcome="ok") == 92.0
    assert _value(s, "radiance_last_switch_timestamp_seconds") == 6000.0


def test_launch_metrics_from_state_files(stacks, tmp_path, caplog):
    f, *_ = stacks
    root = tmp_path / "state"
    registry, _ = exporter.build(exporter.targets_from_stacks(f), state_root=root)
    state.record_launch("demo", mode="eval", phases={"kernel_build": 0.0, "template": 0.01, "cache_key": 0.3},
                        kernel_builds=0, kernel_cache_hits=3, cache_key="k1-eager", radiance_version="0.1.0",
                        vllm_version="0.32.0", model="demo", exec_at=500.0, root=root)
    s = _samples(registry)
    assert _value(s, "radiance_launch_phase_seconds", stack="demo", phase="cache_key") == 0.3
    assert not [k for k in s if ("phase", "exec_to_ready") in k[1]], "not ready yet: no exec_to_ready"
    assert _value(s, "radiance_launch_kernel_cache_hits", stack="demo") == 3
    assert _value(s, "radiance_launch_kernel_builds", stack="demo") == 0
    assert _value(s, "radiance_launch_info", stack="demo", mode="eval", cache_key="k1-eager",
                  radiance_version="0.1.0", vllm_version="0.32.0", model="demo") == 1

    state.record_ready("demo", waited_s=37.0, at=537.5, root=root)
    s = _samples(registry)
    assert _value(s, "radiance_launch_phase_seconds", stack="demo", phase="exec_to_ready") == 37.5

    # a stale ready record from before this launch does not count
    state.record_launch("demo", mode="prod", phases={}, kernel_builds=1, kernel_cache_hits=0, cache_key="k2",
                        radiance_version="0.1.0", vllm_version="0.32.0", model="demo", exec_at=900.0, root=root)
    s = _samples(registry)
    assert not [k for k in s if ("phase", "exec_to_ready") in k[1]]

    # a broken file is reported (metric + one log line), the rest still exported
    (root / "launch" / "junk.json").write_text("{")
    with caplog.at_level(logging.WARNING, logger="radiance.exporter"):
        s = _samples(registry)
        s = _samples(registry)
    assert _value(s, "radiance_state_file_errors", kind="launch") == 1
    assert _value(s, "radiance_launch_kernel_builds", stack="demo") == 1
    assert len([r for r in caplog.records if "junk.json" in r.message]) == 1


# Run as `nobody` after the imports (this interpreter may live under root's 0700 home): the kernel,
# not a mock, refuses the reads.
AS_NOBODY = """
import os, sys
from pathlib import Path
from prometheus_client import generate_latest
from radiance.healthchecks import exporter
targets = [exporter.Target("demo", "http://127.0.0.1:9", 9, "none", "demo")]
registry, _ = exporter.build(targets, state_root=Path(sys.argv[1]))
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print(generate_latest(registry).decode())
"""


def test_unreadable_state_files_are_counted_not_fatal(tmp_path):
    require(os.geteuid() == 0, "needs root to run the exporter as another user")
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="radiance-state-"))  # not under pytest's 0700 tmp dirs
    try:
        root.chmod(0o755)
        state.record_launch("demo", mode="prod", phases={}, kernel_builds=0, kernel_cache_hits=0, cache_key="k",
                            radiance_version="0.1.0", vllm_version="0.32.0", model="demo", root=root)
        assert (root / "launch" / "demo.json").stat().st_mode & 0o777 == 0o644, "state files are world-readable"
        state.record_switch(None, "demo", "ok", 1.0, at=1000.0, root=root)
        secret = root / "switch" / "0000000002000-demo.json"
        secret.write_text((root / "switch" / "0000001000000-demo.json").read_text())
        secret.chmod(0o600)  # what a state file written before 0644 looked like to the exporter's user
        (root / "ready").mkdir(mode=0o700)  # a directory it cannot list
        r = subprocess.run([sys.executable, "-c", AS_NOBODY, str(root)], capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'radiance_state_file_errors{kind="switch"} 1.0' in r.stdout
    assert 'radiance_state_file_errors{kind="ready"} 1.0' in r.stdout
    assert 'radiance_switches_total{outcome="ok",to="demo"} 1.0' in r.stdout  # the readable one still counts
    assert 'radiance_launch_kernel_builds{stack="demo"} 0.0' in r.stdout


def test_bad_stack_file_is_a_clear_error(tmp_path):
    from radiance.stack import StackFileError

    f = tmp_path / "stacks.yaml"
    f.write_text("version: 1\nstacks:\n  demo:\n    arch: cpu\n    quant: paroquant\n    port: 1\n")
    with pytest.raises(StackFileError, match=r"stacks.yaml:3: stacks.demo.model: required key is missing"):
        exporter.targets_from_stacks(f)


def test_exporter_command_serves_metrics_on_loopback(stacks, tmp_path, free_port):
    f, demo, _ = stacks
    radiance = Path(sys.executable).with_name("radiance")
    require(radiance.exists(), f"{radiance} missing: install radiance into this environment (pip install -e .)")
    port = free_port()
    env = os.environ | {"RADIANCE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([str(radiance), "exporter", "--port", str(port), "--stacks", str(f), "--interval", "0.5",
                             "--probe-timeout", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90  # generous: the CI machine is shared and often loaded
        text = ""
        while time.monotonic() < deadline and 'radiance_ready{stack="demo"}' not in text:
            assert proc.poll() is None, proc.stdout.read()
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.ConnectError:
                pass
            time.sleep(0.2)
        assert 'radiance_ready{stack="demo"} 1.0' in text, (
            f"no ready demo in the exporter's /metrics after 90 s:\n{text[-1500:]}")
        assert _listen_addresses(port) == {"127.0.0.1"}, "bound to loopback only by default"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "serving http://127.0.0.1" in out


def _listen_addresses(port: int) -> set[str]:
    """IPv4/IPv6 addresses with a listening TCP socket on `port`, from /proc/net/tcp{,6}."""
    import ipaddress

    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A = LISTEN
                raw = bytes.fromhex(addr)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.add(str(ipaddress.ip_address(raw)))
    return out


def test_exporter_command_errors_are_one_clear_line(tmp_path, free_port):
    radiance = Path(sys.executable).with_name("radiance")
    require(radiance.exists(), f"{radiance} missing: install radiance into this environment (pip install -e .)")
    bad = tmp_path / "stacks.yaml"
    bad.write_text("version: 1\nstacks:\n  demo:\n    arch: cpu\n    quant: paroquant\n    port: 1\n")
    r = subprocess.run([str(radiance), "exporter", "--stacks", str(bad), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "stacks.yaml:3: stacks.demo.model: required key is missing" in r.stderr
    assert "Traceback" not in r.stderr

    import socket

    good = tmp_path / "good.yaml"
    good.write_text(STACKS_YAML.format(demo_port=free_port(), paro_port=free_port(), pq2_port=free_port()))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run([str(radiance), "exporter", "--stacks", str(good), "--port", str(port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr


def test_parallel_scrapes_of_changing_state_files_all_answer(stacks, tmp_path, free_port):
    """The real exporter (prometheus_client serves each scrape on its own thread) scraped 32 at a time
    while switch and launch records come and go: every scrape answers 200 (its state-file cache was
    shared by the scrape threads without a lock: 'dictionary changed size during iteration', a 500)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    f, _, _ = stacks
    home = tmp_path / "home"
    root = home / "state"
    for i in range(400):
        state.record_switch(None, "demo", "ok", 1.0 + i % 50, at=1000.0 + i, root=root)
    port = free_port()
    radiance = Path(sys.executable).with_name("radiance")
    proc = subprocess.Popen([str(radiance), "exporter", "--port", str(port), "--stacks", str(f), "--interval", "60"],
                            env=os.environ | {"RADIANCE_HOME": str(home)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    stop = threading.Event()

    def churn():  # new files (new inodes: parsed again) and removed ones (forgotten by the cache)
        i = 0
        while not stop.is_set():
            p = state.record_switch(None, "paro", "timeout", 2.0, at=5000.0 + i, root=root)
            state.record_launch(f"s{i % 7}", mode="prod", phases={"resolve": 0.1}, kernel_builds=0, kernel_cache_hits=0,
                                cache_key="k", radiance_version="0", vllm_version="0", model="m", root=root)
            if i % 2:
                p.unlink()
            i += 1

    def scrape(_):
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=60).status_code
        except httpx.HTTPError as e:
            return type(e).__name__

    try:
        deadline = time.monotonic() + 60
        while scrape(0) != 200:
            assert proc.poll() is None and time.monotonic() < deadline, "the exporter did not come up"
            time.sleep(0.2)
        writer = threading.Thread(target=churn, daemon=True)
        writer.start()
        with ThreadPoolExecutor(32) as pool:
            codes = list(pool.map(scrape, range(400)))
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    bad = [c for c in codes if c != 200]
    assert not bad, f"{len(bad)} of {len(codes)} parallel scrapes failed: {sorted(set(map(str, bad)))}"
