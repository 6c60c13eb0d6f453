"""The second half of `scripts/demo`: serve the `demo` stack, show a real chat completion, point at /metrics.

`python -m radiance.launcher.demo [--once] [--mode eval|prod]` starts `radiance-launch demo` (which
execs vLLM, so the child *is* the server), waits for it to be ready, sends one chat completion and
prints it. Then it keeps serving until Ctrl-C, or with `--once` stops the server with SIGTERM. The
server's output goes to a log file (its path is printed), so the terminal shows the demo only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import httpx
import typer

from radiance import paths
from radiance.crash import first_crash, tail
from radiance.probe import ProbeResult, wait_ready
from radiance.knobs import knob
from radiance.launcher.cli import Mode
from radiance.stack import bundled_example, load_stacks

PROMPT = "Write a Python one-liner that reverses a string s. Answer with the code only."
STOP_GRACE_S = 30


class ServerDied(RuntimeError):
    pass


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def launcher_command(stacks: Path, mode: str) -> list[str]:
    beside = Path(sys.executable).parent / "radiance-launch"
    exe = [str(beside)] if beside.exists() else [sys.executable, "-c", "from radiance.launcher.cli import main; main()"]
    return [*exe, "demo", "--stacks", str(stacks), "--mode", mode]


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> float:
    """SIGTERM the server (radiance-launch, which forwards it to vLLM) and wait; seconds it took to exit."""
    t = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise RuntimeError(f"the server ignored SIGTERM for {grace_s:g}s and was killed") from None
    return time.monotonic() - t


def chat(base: str, model: str, prompt: str = PROMPT, max_tokens: int = 48,
         on_text: Callable[[str], None] | None = None) -> tuple[str, dict, float]:
    """One streamed chat completion (greedy); `on_text` sees each piece as it arrives.
    Returns (text, usage, seconds)."""
    t = time.monotonic()
    pieces: list[str] = []
    usage: dict = {}
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=httpx.Timeout(30, read=600)) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            usage = event.get("usage") or usage
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece:
                    pieces.append(piece)
                    if on_text:
                        on_text(piece)
    return "".join(pieces), usage, time.monotonic() - t


def run(once: bool, mode: str, stacks: Path, startup_s: float) -> int:
    stack = load_stacks(stacks).get("demo")
    host = stack.host or "127.0.0.1"
    base = f"http://{host}:{stack.port}"
    if not port_free(host, stack.port):
        typer.echo(f"demo: port {stack.port} on {host} is in use (another server?); stop it or change "
                   f"`port` of the demo stack in {stacks}", err=True)
        return 1
    log_path = paths.home() / "logs" / "demo.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = launcher_command(stacks, mode)
    typer.echo(f"demo: starting `radiance-launch demo --mode {mode}` (server log: {log_path})")
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        # own session: Ctrl-C reaches this script, which stops the server with SIGTERM
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def watch(result: ProbeResult) -> None:
            if proc.poll() is not None:
                raise ServerDied(f"the server exited with status {proc.returncode} before it was ready")

        res = wait_ready(base, stack.model_name, startup_s=startup_s, interval_s=2, timeout=60,
                         on_attempt=watch)
        if not res.ok:
            raise ServerDied(f"not ready: {res.reason}")
        typer.echo(f"demo: ready at {base} after {time.monotonic() - t0:.0f} s")
        typer.echo(f"\n>>> {PROMPT}")
        text, usage, secs = chat(base, stack.model_name, on_text=lambda p: typer.echo(p, nl=False))
        typer.echo("\n")
        n = usage.get("completion_tokens", 0)
        path = stack.env.get("RADIANCE_CPU_WEIGHTS") or knob("RADIANCE_CPU_WEIGHTS")
        typer.echo(f"demo: {n} tokens in {secs:.1f} s ({n / secs:.1f} tok/s; {stack.quant} on the CPU path "
                   f"RADIANCE_CPU_WEIGHTS={path}, served through the radiance plugin)")
        typer.echo(f"demo: Prometheus metrics at {base}/metrics (e.g. vllm:generation_tokens_total)")
        if once:
            typer.echo(f"demo: stopped (SIGTERM) in {stop(proc):.1f} s")
            return 0
        typer.echo(f"demo: serving; try  curl {base}/v1/models   — Ctrl-C stops it")
        proc.wait()
        typer.echo(failure_report(f"the server exited with status {proc.returncode}", log_path), err=True)
        return proc.returncode or 1
    except KeyboardInterrupt:
        typer.echo(f"\ndemo: stopped (SIGTERM) in {stop(proc):.1f} s")
        return 0
    except (ServerDied, httpx.HTTPError) as e:
        stop(proc)
        typer.echo(failure_report(str(e), log_path), err=True)
        return 1


def failure_report(what: str, log_path: Path) -> str:
    """What the user sees when the server failed: the first exception in its log (the cause; what
    the process printed last is shutdown noise), then the log's last meaningful lines."""
    lines = log_path.read_text(errors="replace").splitlines()
    crash = first_crash(lines)
    cause = f"demo: the server died: {crash.summary()}\n" if crash else ""
    return (f"{cause}demo: {what}\n--- last lines of {log_path} ---\n" + "\n".join(tail(lines))
            + (f"\n--- cause (above): {crash.error}" if crash else ""))


def main(
    once: Annotated[bool, typer.Option("--once", help="stop the server after the completion")] = False,
    mode: Annotated[Mode, typer.Option(help="launcher mode")] = Mode.eval,
    stacks: Annotated[Optional[Path], typer.Option(help="stack file holding `demo`")] = None,
    startup_s: Annotated[float, typer.Option(help="seconds to wait for the server to become ready")] = 600,
) -> None:
    raise typer.Exit(run(once, mode.value, stacks or bundled_example(), startup_s))


if __name__ == "__main__":
    typer.run(main)
