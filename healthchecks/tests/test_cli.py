"""`radiance probe` as podman's HEALTHCHECK and systemd run it: a real subprocess, exit code + one line."""

from __future__ import annotations

import subprocess
import sys
import os
import threading
from pathlib import Path

from radiance import state
from radiance.testing.tools import require


# The console script the units and podman's HealthCmd run (installed beside this interpreter).
RADIANCE = Path(sys.executable).with_name("radiance")


def _probe(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    require(RADIANCE.exists(), f"{RADIANCE} missing: install radiance into this environment (pip install -e .)")
    return subprocess.run([str(RADIANCE), "probe", *args], capture_output=True, text=True, timeout=60, env=env)


def test_probe_exit_codes(openai_server, free_port):
    up = openai_server()
    r = _probe("ready", "--url", up.url, "--model", "demo", "--timeout", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("\n") == 1 and r.stdout.startswith("ready:")

    starting = openai_server(health=503)
    r = _probe("live", "--url", starting.url)
    assert r.returncode == 1 and "answered 503" in r.stdout

    r = _probe("ready", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "2")
    assert r.returncode == 1 and r.stdout.startswith("down:")

    r = _probe("live", "--url", "127.0.0.1:8000")
    assert r.returncode == 2 and "must start with http" in r.stderr


def test_wait_with_stack_records_ready(openai_server, tmp_path):
    s = openai_server(health=503)
    threading.Timer(1.0, lambda: setattr(s.behaviour, "health", 200)).start()
    env = os.environ | {"RADIANCE_HOME": str(tmp_path)}
    r = _probe("ready", "--url", s.url, "--wait", "20", "--interval", "0.3", "--timeout", "3", "--stack", "demo",
               env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = state.read_state("ready", "demo", root=tmp_path / "state")
    assert rec["stack"] == "demo" and 0 < rec["waited_s"] < 20


def test_wait_gives_up_with_exit_1(openai_server):
    s = openai_server(health=503)
    r = _probe("ready", "--url", s.url, "--wait", "1", "--interval", "0.3")
    assert r.returncode == 1 and "startup window of 1s ran out" in r.stdout


def test_stack_without_wait_is_a_usage_error(openai_server):
    r = _probe("ready", "--url", "http://127.0.0.1:1", "--stack", "demo")
    assert r.returncode == 2 and "needs --wait" in r.stderr


def test_ready_argv_runs_as_built(openai_server, tmp_path):
    from radiance.probe import ready_argv

    s = openai_server(models=["qwen"])
    argv = ready_argv(s.url, "qwen", timeout_s=5, wait_s=10, interval_s=0.5, stack="paro", exe=str(RADIANCE))
    assert argv[1:] == ["probe", "ready", "--url", s.url, "--timeout", "5", "--model", "qwen", "--wait", "10",
                        "--interval", "0.5", "--stack", "paro"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       env=os.environ | {"RADIANCE_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert state.read_state("ready", "paro", root=tmp_path / "state")["stack"] == "paro"
    assert ready_argv(s.url)[1:] == ["probe", "ready", "--url", s.url, "--timeout", "30"]


def test_probe_sends_the_api_key_from_a_file_or_the_environment(openai_server, tmp_path):
    srv = openai_server()
    srv.behaviour.api_key = "sk-test-4711"
    r = _probe("ready", "--url", srv.url, "--timeout", "5")
    assert r.returncode == 1 and "answered 401: the server wants an API key" in r.stdout, r.stdout
    key = tmp_path / "key"
    key.write_text("sk-test-4711\n")
    r = _probe("ready", "--url", srv.url, "--timeout", "5", "--api-key-file", str(key))
    assert r.returncode == 0, r.stdout + r.stderr
    r = _probe("ready", "--url", srv.url, "--timeout", "5", "--api-key-env", "MY_KEY",
               env=os.environ | {"MY_KEY": "sk-test-4711"})
    assert r.returncode == 0, r.stdout + r.stderr
    key.write_text("wrong")
    r = _probe("ready", "--url", srv.url, "--timeout", "5", "--api-key-file", str(key))
    assert r.returncode == 1 and "the API key sent was refused" in r.stdout
    key.write_text("")
    r = _probe("live", "--url", srv.url, "--api-key-file", str(key))
    assert r.returncode == 2 and f"--api-key-file {key}: the file is empty" in r.stderr
    assert "sk-test" not in r.stdout + r.stderr
