"""Commands this package adds to the `radiance` CLI: `radiance probe live|ready|health|watch`, `radiance exporter`.

Probe exit codes fit podman `HEALTHCHECK`/`HealthCmd` and systemd `ExecStartPost=`/`ExecCondition=`:
0 = healthy, 1 = unhealthy (the one-line reason on stdout lands in podman's health log / the
journal), 2 = bad arguments. A waiting probe stopped with SIGTERM exits 0 (the unit is being
stopped, which is not a failed start).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

probe_app = typer.Typer(no_args_is_help=True, help="Live / ready probes of a vLLM server (exit 0 healthy, 1 not).")

Url = Annotated[str, typer.Option("--url", help="Server base URL, e.g. http://127.0.0.1:8000")]
Timeout = Annotated[float, typer.Option("--timeout", min=0.001, help="Seconds for the whole probe (one attempt).")]
KeyFile = Annotated[Path | None, typer.Option(
    "--api-key-file", help="File holding the server's API key (sent as a Bearer token; never give the key itself).")]
KeyEnv = Annotated[str | None, typer.Option(
    "--api-key-env", help="Environment variable holding the server's API key (in a container: VLLM_API_KEY).")]


def _key(key_file: Path | None, key_env: str | None) -> str | None:
    from radiance import apikey

    if key_file and key_env:
        raise ValueError("give --api-key-file or --api-key-env, not both")
    if key_file:
        return apikey.read_key(key_file, "--api-key-file")
    return apikey.from_env(key_env) if key_env else None


def _finish(result) -> None:
    typer.echo(result.reason)
    raise typer.Exit(0 if result.ok else 1)


def _stopped_while_waiting(*_args) -> None:
    # systemd stopping a unit during its start SIGTERMs ExecStartPost, and counts a control process
    # killed by a signal as a failed unit: a stop (vllm-switch giving up on it) is not a failed start.
    typer.echo("stopped while waiting for readiness (SIGTERM: the unit is being stopped)")
    raise SystemExit(0)


def _bad(e: ValueError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


@probe_app.command("live")
def live_cmd(url: Url, timeout: Timeout = 5.0, api_key_file: KeyFile = None, api_key_env: KeyEnv = None) -> None:
    """The server process answers /health with 200 (vLLM answers 503 when its engine is dead)."""
    from radiance import probe

    try:
        _finish(probe.live(url, timeout, api_key=_key(api_key_file, api_key_env)))
    except ValueError as e:
        _bad(e)


@probe_app.command("ready")
def ready_cmd(
    url: Url,
    model: Annotated[str | None, typer.Option("--model", help="Model the server must list (default: the first it lists).")] = None,
    timeout: Timeout = 30.0,
    wait: Annotated[float | None, typer.Option(
        "--wait", min=0.001,
        help="Startup window in seconds: keep probing until ready or the window closes (for ExecStartPost / "
             "vllm-switch). Without it: one attempt (for HEALTHCHECK).")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.001, help="Seconds between attempts under --wait.")] = 5.0,
    stack: Annotated[str | None, typer.Option(
        "--stack", help="With --wait: record the time the stack became ready (the launch's exec-to-ready phase).")] = None,
    api_key_file: KeyFile = None,
    api_key_env: KeyEnv = None,
    pid: Annotated[int | None, typer.Option(
        "--pid", min=1, help="With --wait: give up as soon as this process (the unit's $MAINPID) is gone.")] = None,
) -> None:
    """Live, the model is listed, and a 1-token completion returns within --timeout."""
    from radiance import probe
    from radiance import state

    if stack and wait is None:
        _bad(ValueError("--stack records when a stack became ready and needs --wait"))
    if pid and wait is None:
        _bad(ValueError("--pid ends a waiting probe early and needs --wait"))
    try:
        key = _key(api_key_file, api_key_env)
        if wait is None:
            _finish(probe.ready(url, model, timeout, api_key=key))
        signal.signal(signal.SIGTERM, _stopped_while_waiting)
        result = probe.wait_ready(url, model, startup_s=wait, interval_s=interval, timeout=timeout, api_key=key,
                                  pid=pid)
    except ValueError as e:
        _bad(e)
    if result.ok and stack:
        state.record_ready(stack, waited_s=result.latency_s)
    _finish(result)


@probe_app.command("health")
def health_cmd(url: Url, model: Annotated[str | None, typer.Option(
        "--model", help="Model an idle server must answer a completion with (default: the first it lists).")] = None,
        timeout: Timeout = 30.0, api_key_file: KeyFile = None, api_key_env: KeyEnv = None) -> None:
    """Live and making progress (podman's health command): an idle server answers a 1-token completion;
    a busy one generates tokens or finishes requests within --timeout (read from its /metrics)."""
    from radiance import probe

    try:
        _finish(probe.healthy(url, model, timeout, api_key=_key(api_key_file, api_key_env)))
    except ValueError as e:
        _bad(e)


@probe_app.command("watch")
def watch_cmd(
    stack: Annotated[str, typer.Option("--stack", help="Stack to watch (its unit, URL, model and API key file).")],
    stacks: Annotated[Path | None, typer.Option(
        "--stacks", help="Stack file (default: RADIANCE_STACKS, else $RADIANCE_HOME/stacks.yaml, else the bundled example).")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between health probes.")] = 30.0,
    timeout: Timeout = 30.0,
    retries: Annotated[int, typer.Option("--retries", min=1, help="Failed probes in a row that make the stack unhealthy.")] = 3,
) -> None:
    """Watchdog of a native stack: while its unit is active, run the health probe; after --retries
    failures in a row, SIGKILL its main process so systemd restarts it (what podman's
    --health-on-failure=kill does for a container). Runs until stopped."""
    from radiance.healthchecks import watchdog
    from radiance.stack import StackFileError

    try:
        w = watchdog.Watchdog.for_stack(stacks, stack, interval_s=interval, timeout_s=timeout, retries=retries)
    except (StackFileError, ValueError) as e:
        _bad(e)
    w.run()


def exporter_cmd(
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port the /metrics endpoint listens on.")] = 9410,
    host: Annotated[str, typer.Option("--host", help="Address to bind; loopback unless you mean to expose it.")] = "127.0.0.1",
    stacks: Annotated[Path | None, typer.Option(
        "--stacks", help="Stack file (default: RADIANCE_STACKS, else $RADIANCE_HOME/stacks.yaml, else the bundled example).")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, help="Seconds between probe rounds.")] = 15.0,
    probe_timeout: Annotated[float, typer.Option("--probe-timeout", min=0.1, help="Seconds for one ready probe.")] = 10.0,
) -> None:
    """Serve Prometheus metrics for the stacks, switches and launches (radiance_*)."""
    from radiance.healthchecks import exporter
    from radiance.stack import StackFileError

    try:
        exporter.serve(host=host, port=port, stacks_path=stacks, interval_s=interval, probe_timeout_s=probe_timeout)
    except (exporter.ExporterError, StackFileError) as e:
        typer.echo(f"radiance exporter: {e}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    app.add_typer(probe_app, name="probe")
    app.command("exporter")(exporter_cmd)
