"""Live and ready probes for a vLLM OpenAI server.

`live`: the server process answers `GET /health` with 200 (vLLM answers 503 once its engine died).
`ready`: live, `GET /v1/models` lists the model, and a 1-token completion comes back — all within
one deadline, so a probe never runs longer than the `timeout` it was given (podman's
`--health-timeout`, systemd's `TimeoutStartSec=` count on that). Readiness is what a start waits for.
`healthy`: live and making progress — the steady-state check (podman's health command, the native
watchdog). An idle server must answer a 1-token completion (a hung engine would not); a busy one
must move its token or finished-request counters within the timeout. A server with every slot busy
on long generations queues a completion behind them: judged by a completion it would be killed
with its in-flight requests, judged by progress it is healthy.

`wait_ready` is the startup window: model load + compile take minutes, so callers (units,
vllm-switch) poll `ready` until a startup deadline, at an interval, instead of judging a server that
is still loading by the steady-state probe's rules.

`api_key`: a server started with an API key (vLLM's VLLM_API_KEY) refuses `/v1/*` without it; the
probes send it as `Authorization: Bearer` (radiance.apikey reads it from a file or the environment,
never from a command line).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from radiance.apikey import bearer
from radiance.vllm_load import Load, MetricsError, parse

# The completion that proves the engine generates: one greedy token of a prompt every tokenizer has.
PROBE_PROMPT = "1"


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str  # one line, fit for podman's health log and systemd's journal
    latency_s: float  # wall time of the whole probe


class _Deadline:
    """Every request of one probe takes its timeout from what is left of the probe's budget."""

    def __init__(self, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"probe timeout must be > 0 seconds, got {timeout}")
        self.start = time.monotonic()
        self.end = self.start + timeout
        self.timeout = timeout

    def left(self) -> float:
        return self.end - time.monotonic()

    def http_timeout(self) -> httpx.Timeout:
        # httpx needs a positive number; a spent budget is caught before the request by the callers.
        return httpx.Timeout(max(self.left(), 0.001))

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _base(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"probe url must start with http:// or https://, got {url!r}")
    return url.rstrip("/")


def _get(client: httpx.Client, dl: _Deadline, url: str) -> httpx.Response | str:
    """The response, or a one-line reason why there is none."""
    try:
        return client.get(url, timeout=dl.http_timeout())
    except httpx.ConnectError as e:
        return f"down: cannot connect to {url} ({_short(e)})"
    except httpx.TimeoutException:
        return f"timeout: no answer from {url} within {dl.timeout:g}s"
    except httpx.HTTPError as e:
        return f"error: {url}: {type(e).__name__}: {_short(e)}"


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[-1] if text else type(e).__name__


def _get_200(client: httpx.Client, dl: _Deadline, url: str, failed: str) -> httpx.Response | str:
    """The 200 response, or why not (`failed`: how a non-200 answer is reported, {code} filled in)."""
    r = _get(client, dl, url)
    if isinstance(r, str):
        return r
    return r if r.status_code == 200 else failed.format(code=r.status_code)


def _live(client: httpx.Client, base: str, dl: _Deadline) -> str | None:
    r = _get_200(client, dl, f"{base}/health", f"not live: {base}/health answered {{code}} (engine starting or dead)")
    return r if isinstance(r, str) else None


def live(url: str, timeout: float = 5.0, api_key: str | None = None) -> ProbeResult:
    """The server process answers /health with 200."""
    base, dl = _base(url), _Deadline(timeout)
    with httpx.Client(headers=bearer(api_key)) as client:
        why = _live(client, base, dl)
    if why:
        return ProbeResult(False, why, dl.elapsed())
    return ProbeResult(True, f"live: {base}/health answered 200", dl.elapsed())


def _served_models(client: httpx.Client, base: str, dl: _Deadline) -> list[str] | str:
    r = _get(client, dl, f"{base}/v1/models")
    if isinstance(r, str):
        return r
    if r.status_code == 401:
        sent = "the API key sent was refused" if "authorization" in client.headers else \
            "the server wants an API key (the stack's api_key_file; `--api-key-file`)"
        return f"not ready: {base}/v1/models answered 401: {sent}"
    if r.status_code != 200:
        return f"not ready: {base}/v1/models answered {r.status_code}"
    try:
        return [m["id"] for m in r.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return f"not ready: {base}/v1/models did not answer an OpenAI model list: {r.text[:120]!r}"


def _complete(client: httpx.Client, base: str, model: str, dl: _Deadline) -> str | None:
    url = f"{base}/v1/completions"
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
    try:
        r = client.post(url, json=body, timeout=dl.http_timeout())
    except httpx.TimeoutException:
        return f"not ready: 1-token completion of {model!r} took longer than {dl.timeout:g}s"
    except httpx.HTTPError as e:
        return f"not ready: {url}: {type(e).__name__}: {_short(e)}"
    if r.status_code != 200:
        return f"not ready: 1-token completion of {model!r} answered {r.status_code}: {r.text[:160]!r}"
    try:
        choices = r.json()["choices"]
    except (ValueError, KeyError, TypeError):
        choices = None
    if not choices:
        return f"not ready: 1-token completion of {model!r} returned no choices: {r.text[:160]!r}"
    return None


def ready(url: str, model: str | None = None, timeout: float = 30.0, api_key: str | None = None) -> ProbeResult:
    """Live, the model is listed, and a 1-token completion returns — within `timeout` in all.

    `model=None` probes whichever model the server lists first (one model per stack).
    """
    base, dl = _base(url), _Deadline(timeout)
    with httpx.Client(headers=bearer(api_key)) as client:
        why = _live(client, base, dl)
        if why:
            return ProbeResult(False, why, dl.elapsed())
        served = _served_models(client, base, dl)
        if isinstance(served, str):
            return ProbeResult(False, served, dl.elapsed())
        if model is None:
            if not served:
                return ProbeResult(False, f"not ready: {base}/v1/models lists no model", dl.elapsed())
            model = served[0]
        elif model not in served:
            return ProbeResult(False, f"not ready: {base}/v1/models lists {served}, not {model!r}", dl.elapsed())
        why = _complete(client, base, model, dl)
    if why:
        return ProbeResult(False, why, dl.elapsed())
    return ProbeResult(True, f"ready: {model!r} answered a 1-token completion in {dl.elapsed():.2f}s", dl.elapsed())


def _load(client: httpx.Client, base: str, dl: _Deadline) -> Load | str:
    r = _get_200(client, dl, f"{base}/metrics", f"unhealthy: {base}/metrics answered {{code}}")
    if isinstance(r, str):
        return r
    try:
        return parse(r.text)
    except MetricsError as e:
        return f"unhealthy: {base}/metrics: {e}"


def load(url: str, timeout: float = 5.0) -> Load | str:
    """The server's running and waiting requests (radiance.vllm_load.Load), or why they cannot be read."""
    base, dl = _base(url), _Deadline(timeout)
    with httpx.Client() as client:
        return _load(client, base, dl)


PROGRESS_POLL_S = 0.5


def healthy(url: str, model: str | None = None, timeout: float = 30.0, api_key: str | None = None) -> ProbeResult:
    """Live and making progress, within `timeout`: idle and answering a 1-token completion, or busy
    and generating (a PROGRESS counter of /metrics moved while this probe watched)."""
    base, dl = _base(url), _Deadline(timeout)
    with httpx.Client(headers=bearer(api_key)) as client:
        why = _live(client, base, dl)
        first = _load(client, base, dl) if why is None else why
        if isinstance(first, str):
            return ProbeResult(False, first, dl.elapsed())
        if first.idle:  # nothing queued: a completion is served at once, and proves the engine works
            r = ready(url, model, timeout=max(dl.left(), 0.001), api_key=api_key)
            return ProbeResult(r.ok, f"healthy: idle, {r.reason}" if r.ok else r.reason, dl.elapsed())
        while dl.left() > PROGRESS_POLL_S:
            time.sleep(PROGRESS_POLL_S)
            now = _load(client, base, dl)
            if isinstance(now, str):
                return ProbeResult(False, now, dl.elapsed())
            if now.progress > first.progress:
                return ProbeResult(True, f"healthy: busy ({now.describe()}), making progress "
                                         f"(+{now.progress - first.progress:g} tokens/requests in {dl.elapsed():.1f}s)",
                                   dl.elapsed())
    return ProbeResult(False, f"unhealthy: {first.describe()}, and no token generated or request finished in "
                              f"{dl.timeout:g}s", dl.elapsed())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


def wait_ready(
    url: str,
    model: str | None = None,
    *,
    startup_s: float,
    interval_s: float = 2.0,
    timeout: float = 30.0,
    on_attempt: Callable[[ProbeResult], None] | None = None,
    api_key: str | None = None,
    pid: int | None = None,
) -> ProbeResult:
    """Poll `ready` until it passes or the startup window `startup_s` closes.

    Returns the passing result (latency_s = time from the first attempt until ready) or the last
    failing one with the window named in its reason. Each attempt's timeout is cut to what is left
    of the window, and no attempt starts without at least an interval of it left, so the call
    returns within `startup_s`. With `pid` (the server's process: a unit's $MAINPID) the wait ends
    as soon as that process is gone: a server that died does not get the rest of the window.
    """
    if startup_s <= 0 or interval_s <= 0:
        raise ValueError(f"startup_s and interval_s must be > 0, got {startup_s}, {interval_s}")
    start = time.monotonic()
    end = start + startup_s
    while True:
        if pid is not None and not _alive(pid):
            return ProbeResult(False, f"down: the server process {pid} exited before it was ready (its log says why)",
                               time.monotonic() - start)
        result = ready(url, model, timeout=min(timeout, end - time.monotonic()), api_key=api_key)
        if on_attempt:
            on_attempt(result)
        if result.ok:
            return ProbeResult(True, result.reason, time.monotonic() - start)
        next_at = time.monotonic() + interval_s
        # An attempt left with less than an interval (or its own timeout) would only time out and
        # bury the real reason (a 503, a missing model) under "no answer within 0.01s".
        if end - next_at < min(timeout, interval_s):
            return ProbeResult(False, f"{result.reason} (startup window of {startup_s:g}s ran out)",
                               time.monotonic() - start)
        time.sleep(next_at - time.monotonic())


def health_argv(url: str, model: str | None = None, *, timeout_s: float = 30.0, exe: str = "radiance",
                api_key_env: str | None = None) -> list[str]:
    """The `radiance probe health` command line: podman's --health-cmd, the steady-state check."""
    argv = [exe, "probe", "health", "--url", url, "--timeout", f"{timeout_s:g}"]
    if model:
        argv += ["--model", model]
    return argv + (["--api-key-env", api_key_env] if api_key_env else [])


def ready_argv(url: str, model: str | None = None, *, timeout_s: float = 30.0, wait_s: float | None = None,
               interval_s: float = 5.0, stack: str | None = None, exe: str = "radiance",
               api_key_env: str | None = None) -> list[str]:
    """The `radiance probe ready` command line, for units and podman's --health-cmd to embed.

    One attempt: no `wait_s`. Startup (ExecStartPost=, vllm-switch): `wait_s` = the
    startup window, and `stack` to record when it became ready (the exec_to_ready phase). The key
    file of a unit's credential (`%d/...`) is a systemd specifier: the unit template appends it.
    """
    argv = [exe, "probe", "ready", "--url", url, "--timeout", f"{timeout_s:g}"]
    if model:
        argv += ["--model", model]
    if api_key_env:
        argv += ["--api-key-env", api_key_env]
    if wait_s is not None:
        argv += ["--wait", f"{wait_s:g}", "--interval", f"{interval_s:g}"]
        if stack:
            argv += ["--stack", stack]
    elif stack:
        raise ValueError("stack is recorded only by a waiting probe: give wait_s too")
    return argv
