"""What `radiance-launch` does, in order: plan, device, kernels, plugin, record, serve.

Each step is its own module; this file only sequences them and times them (the "launch" state
record the exporter reads). The last step runs vLLM as this process's child (launcher/supervise.py:
signals forwarded, output passed through, a crash named and turned into a non-zero exit).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from radiance import apikey
from radiance.compat import VllmVersionError, check_vllm
from radiance.knobs import knob
from radiance.state import record_launch
from radiance.kernels.build import BuildResult, build_kernels
from radiance.kernels.linear_spec import build_flag
from radiance.launcher import device as devmod
from radiance.launcher import supervise
from radiance.launcher.argv import NEUTRAL_DIR, dry_run_text, vllm_argv, vllm_env
from radiance.launcher.kernel_specs import SpecError, linear_specs
from radiance.launcher.plan import LaunchPlan, PlanError, resolve_plan
from radiance.stack import PLUGIN_METHODS, load_stacks, vendor

log = logging.getLogger("radiance.launch")

PLUGIN_GROUP = "vllm.general_plugins"


class LaunchError(RuntimeError):
    """A launch step failed; the message says which and what to do."""


def in_container() -> bool:
    # podman writes /run/.containerenv into every container it starts
    return Path("/run/.containerenv").exists()


def verify_plugin(quant: str) -> None:
    """The radiance plugin is installed as a vLLM general plugin and registers `quant`.

    vLLM runs plugins through the entry point, and a plugin whose import fails is only logged, so
    a broken install would serve nothing quantized and say little; this fails the launch instead.
    """
    eps = [ep for ep in md.entry_points(group=PLUGIN_GROUP) if ep.value.startswith("radiance.plugin")]
    if not eps:
        raise LaunchError(f"no `{PLUGIN_GROUP}` entry point for radiance.plugin: radiance is not installed in "
                          f"this interpreter ({sys.executable}); run scripts/bootstrap or `pip install -e .`")
    try:
        eps[0].load()()  # what vLLM's plugin loader will call, in every process
        from radiance.plugin import check_registered  # the plugin is the one package importing vLLM

        check_registered(quant)
    except Exception as e:
        raise LaunchError(f"the radiance vLLM plugin did not register quant method {quant!r}: "
                          f"{type(e).__name__}: {e}") from None


def cpu_step(plan: LaunchPlan) -> LaunchPlan:
    """A CPU stack: log the CPU, the dtype it serves in and the GEMM each kind of linear runs on; the
    plan with that dtype (the same in a dry run: what it prints is what runs)."""
    from radiance.plugin import cpu_host  # imports vLLM and torch: CPU stacks only

    try:
        cpu = cpu_host.plan(plan.quant, plan.env_map.get("RADIANCE_CPU_WEIGHTS") or knob("RADIANCE_CPU_WEIGHTS"),
                            plan.dtype, plan.max_num_seqs, PLUGIN_METHODS)
    except cpu_host.CpuPathError as e:
        raise PlanError(f"stack {plan.stack!r}: {e}") from None
    for line in cpu.lines():
        log.info("%s", line)
    return dataclasses.replace(plan, dtype=cpu.dtype)


def build_step(plan: LaunchPlan) -> BuildResult:
    if plan.arch == "cpu" or plan.quant not in PLUGIN_METHODS:
        why = "torch reference path" if plan.arch == "cpu" else f"quant {plan.quant} runs vLLM's own kernels"
        log.info("kernels: nothing to build for %s (%s)", plan.arch, why)
        return BuildResult(None, False, "")
    flags, specs = plan.kernel_flags, []
    if vendor(plan.arch) == "nvidia":  # warm the checkpoint's linears' kernels into the stack's TRITON_CACHE_DIR
        try:
            specs = linear_specs(plan.model, plan.quant, plan.tp, plan.dtype)
        except (SpecError, OSError, ValueError) as e:
            raise LaunchError(f"{plan.model}: cannot read the linear shapes the kernels are warmed for: {e}") from None
        flags = (*flags, build_flag(specs, plan.env_map))
    result = build_kernels(plan.arch, plan.kernel_cache, flags, specs=specs, env=vllm_env(plan))
    if result.built:
        log.info("kernels: built %s%s", result.path, _warm_summary(result.path))
    else:
        log.info("kernels: cache hit %s (0 builds)", result.path)
    if plan.kernel_dir is not None and result.path != plan.kernel_dir:
        raise LaunchError(f"kernel build landed in {result.path}, the plan expected {plan.kernel_dir}")
    return result


def _warm_summary(entry: Path) -> str:
    report = entry / "warm.json"
    if not report.is_file():
        return ""
    r = json.loads(report.read_text())
    return f" ({r['specs']} linear shapes at {r['rows']} row counts: {r['compiled']} kernels compiled in {r['seconds']} s)"


def serve_vllm(plan: LaunchPlan, secret_env: Mapping[str, str] | None = None) -> NoReturn:
    """Replace this process with the small supervisor (launcher/supervise.py), which runs vLLM as its
    child: the launcher's own imports (vLLM, torch: hundreds of MB) are not kept for the server's
    life. `secret_env` (the API key) goes to vLLM's environment only: never logged, never in argv."""
    argv = vllm_argv(plan)
    env = {**os.environ, **vllm_env(plan), **(secret_env or {})}
    log.info("vLLM (in %s): %s", NEUTRAL_DIR, shlex.join(argv))
    os.chdir(NEUTRAL_DIR)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(sys.executable, supervise.command(argv), env)


def launch(name: str, stacks: Path | None, mode: str, dry_run: bool,
           environ: Mapping[str, str] | None = None) -> int:
    """Run the steps; returns 0 after a dry run, otherwise does not return (the supervisor runs vLLM)."""
    environ = os.environ if environ is None else environ
    phases: dict[str, float] = {}
    t = time.monotonic()
    sf = load_stacks(stacks)
    plan = resolve_plan(sf, name, mode, environ)
    if not dry_run:
        runs_here(plan)  # before the CPU step, which imports vLLM and torch
    if plan.arch == "cpu":
        plan = cpu_step(plan)
    key_file = apikey.stack_key_file(sf, name)
    phases["resolve"] = time.monotonic() - t
    if dry_run:
        if key_file is not None and not (plan.runtime == "podman" and in_container()):
            _api_key(lambda: apikey.read_key(key_file))  # a bad key file fails the dry run too
        sys.stdout.write(dry_run_text(plan))
        if key_file is not None:
            sys.stdout.write(f"# and {apikey.ENV_VAR}={apikey.REDACTED} (from api_key_file {key_file})\n")
        return 0
    secret_env, origin = _api_key(lambda: apikey.launch_env(key_file, plan.runtime, environ))
    if origin:
        log.info("api key: %s for vLLM from %s", apikey.ENV_VAR, origin)

    t = time.monotonic()
    if plan.arch == "cpu":  # runs on any machine: skip detection (it imports torch: seconds)
        log.info("device: not probed (a cpu stack runs anywhere); stack %s mode %s", name, mode)
    else:  # the stack's GPU variables are set first: what is judged is what vLLM will see
        dev = devmod.take_gpus(plan.arch, plan.devices, name)
        log.info("device: %s; stack %s (%s, host GPU(s) %s) mode %s", dev.describe(), name, plan.arch,
                 ",".join(map(str, plan.devices)), mode)
    phases["device"] = time.monotonic() - t

    t = time.monotonic()
    built = build_step(plan)
    phases["kernel_build"] = time.monotonic() - t

    t = time.monotonic()
    if plan.quant in PLUGIN_METHODS:
        verify_plugin(plan.quant)
        log.info("plugin: radiance registers quant method %s (checked in %.1f s)", plan.quant, time.monotonic() - t)
    phases["plugin"] = time.monotonic() - t

    log.info("chat template: %s", plan.template.describe() if plan.template else "none (the model bundles none)")
    plan.compile_dir.mkdir(parents=True, exist_ok=True)
    log.info("compile cache: %s", plan.compile_dir)
    record_launch(name, mode=mode, phases={k: round(v, 3) for k, v in phases.items()},
                  kernel_builds=int(built.built), kernel_cache_hits=int(built.path is not None and not built.built),
                  cache_key=plan.cache_key, radiance_version=plan.versions.radiance,
                  vllm_version=plan.versions.vllm, model=plan.served_name, exec_at=time.time())
    return serve_vllm(plan, secret_env)


def runs_here(plan: LaunchPlan) -> None:
    """A podman stack runs only inside its container, and only with a vLLM in the tested range."""
    if plan.runtime == "podman" and not in_container():
        raise LaunchError(f"stack {plan.stack!r} runs in podman ({plan.image}): start it with `vllm-switch "
                          f"{plan.stack}` or its unit, which runs radiance-launch inside the container; "
                          f"`--dry-run` shows the command")
    try:
        check_vllm(image=plan.image if plan.runtime == "podman" else None)
    except VllmVersionError as e:
        raise LaunchError(str(e)) from None


def _api_key(read):
    try:
        return read()
    except apikey.ApiKeyError as e:
        raise PlanError(str(e)) from None  # a configuration error (exit 2): restarting cannot fix it
