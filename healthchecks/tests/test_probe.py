"""Probes against real HTTP servers in each state a vLLM server passes through."""

from __future__ import annotations

import threading
import time

import pytest

from radiance import probe


def test_down_server_is_neither_live_nor_ready(free_port):
    url = f"http://127.0.0.1:{free_port()}"
    r = probe.live(url, timeout=2)
    assert not r.ok and r.reason.startswith("down: cannot connect to")
    r = probe.ready(url, "demo", timeout=2)
    assert not r.ok and r.reason.startswith("down:")


def test_starting_server_503_is_not_live(openai_server):
    s = openai_server(health=503)
    r = probe.live(s.url, timeout=2)
    assert not r.ok
    assert "answered 503" in r.reason
    r = probe.ready(s.url, "demo", timeout=2)
    assert not r.ok and "answered 503" in r.reason
    # ready stops at the first failing step: no model list, no completion asked of a dead engine
    assert s.behaviour.requests[-1] == "GET /health"


def test_live_but_model_not_listed_is_not_ready(openai_server):
    s = openai_server(models=["other"])
    assert probe.live(s.url, timeout=2).ok
    r = probe.ready(s.url, "demo", timeout=2)
    assert not r.ok
    assert "lists ['other'], not 'demo'" in r.reason


def test_live_but_completion_fails_is_not_ready(openai_server):
    s = openai_server(completion_status=500)
    assert probe.live(s.url, timeout=2).ok
    r = probe.ready(s.url, "demo", timeout=2)
    assert not r.ok and "answered 500" in r.reason


def test_live_but_completion_too_slow_is_not_ready_within_timeout(openai_server):
    s = openai_server(completion_delay_s=3)
    t0 = time.monotonic()
    r = probe.ready(s.url, "demo", timeout=0.8)
    took = time.monotonic() - t0
    assert not r.ok and "took longer than 0.8s" in r.reason
    assert took < 2.0, f"the probe must respect its own deadline, took {took:.1f}s"


def test_ready_server(openai_server):
    s = openai_server()
    r = probe.ready(s.url, "demo", timeout=5)
    assert r.ok, r.reason
    assert r.reason.startswith("ready: 'demo'")
    assert 0 < r.latency_s < 5
    assert s.behaviour.requests == ["GET /health", "GET /v1/models", "POST /v1/completions"]


def test_ready_without_model_probes_the_listed_one(openai_server):
    s = openai_server(models=["qwen"])
    assert probe.ready(s.url, None, timeout=5).ok
    empty = openai_server(models=[])
    r = probe.ready(empty.url, None, timeout=5)
    assert not r.ok and "lists no model" in r.reason


def test_wait_ready_passes_once_the_server_finishes_starting(openai_server):
    s = openai_server(health=503)
    threading.Timer(1.0, lambda: setattr(s.behaviour, "health", 200)).start()
    seen = []
    r = probe.wait_ready(s.url, "demo", startup_s=10, interval_s=0.2, timeout=2, on_attempt=seen.append)
    assert r.ok, r.reason
    assert any(not a.ok for a in seen), "the first attempts saw the 503"
    assert 0.9 < r.latency_s < 5


def test_wait_ready_gives_up_when_the_startup_window_closes(openai_server):
    s = openai_server(health=503)
    t0 = time.monotonic()
    r = probe.wait_ready(s.url, "demo", startup_s=1.0, interval_s=0.3, timeout=2)
    assert not r.ok
    assert "startup window of 1s ran out" in r.reason and "503" in r.reason
    assert time.monotonic() - t0 < 4.0  # the window (1 s) plus slack for a loaded machine


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://x"])
def test_bad_url_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="must start with http"):
        probe.live(bad)


def test_nonpositive_timeout_is_refused():
    with pytest.raises(ValueError, match="timeout must be > 0"):
        probe.live("http://127.0.0.1:1", timeout=0)


def test_wait_ends_when_the_server_process_is_gone(free_port):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    t = time.monotonic()
    r = probe.wait_ready(f"http://127.0.0.1:{free_port()}", "demo", startup_s=60, interval_s=0.2, timeout=1,
                         pid=dead.pid)
    assert not r.ok and f"the server process {dead.pid} exited before it was ready" in r.reason
    assert time.monotonic() - t < 5, "a dead server must not get the rest of the startup window"


@pytest.fixture
def fake_vllm(free_port):
    """Factory: the FAKE vLLM of the systemd tests (radiance/testing/fake_vllm.py) in a thread."""
    from radiance.testing import fake_vllm as fv

    servers = []

    def start(*flags: str) -> str:
        port = free_port()
        srv = fv.make_server(fv.parse_args(["--port", str(port), "--model", "demo", "--load-s", "0", *flags]))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{port}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _saturate(url: str, requests: int, tokens: int) -> list[threading.Thread]:
    import httpx

    def one():
        httpx.post(f"{url}/v1/completions", json={"model": "demo", "prompt": "x", "max_tokens": tokens}, timeout=60)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(requests)]
    for t in threads:
        t.start()
    return threads


def test_a_busy_server_that_generates_is_healthy_though_not_ready(fake_vllm):
    """Every slot busy on long generations: a 1-token completion queues past the timeout (the old
    health check, and the kill it led to), but tokens are being generated."""
    url = fake_vllm("--max-num-seqs", "2", "--token-s", "0.05")
    assert probe.healthy(url, "demo", timeout=2).reason.startswith("healthy: idle, ready: 'demo'")
    _saturate(url, requests=4, tokens=100)
    time.sleep(0.3)
    assert not probe.ready(url, "demo", timeout=1.5).ok
    r = probe.healthy(url, "demo", timeout=1.5)
    assert r.ok and r.reason.startswith("healthy: busy (2 request(s) running, "), r.reason  # 3 waiting: the ready probe's too
    assert "making progress" in r.reason


def test_a_busy_server_that_stopped_generating_is_unhealthy(fake_vllm):
    url = fake_vllm("--max-num-seqs", "1", "--token-s", "3600")  # a request that never produces a token
    _saturate(url, requests=1, tokens=1)
    time.sleep(0.3)
    t = time.monotonic()
    r = probe.healthy(url, "demo", timeout=1.5)
    assert not r.ok and time.monotonic() - t < 2.5
    assert r.reason == "unhealthy: 1 request(s) running, 0 waiting, and no token generated or request finished in 1.5s"


def test_health_needs_vllms_metrics(openai_server):
    s = openai_server()  # answers /health and completions, but has no /metrics
    r = probe.healthy(s.url, "demo", timeout=2)
    assert not r.ok and "/metrics answered 404" in r.reason
