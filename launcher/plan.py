"""Stack + mode + environment -> one immutable LaunchPlan (step 1 of radiance-launch).

Mode defaults live in MODE_DEFAULTS and nowhere else. Precedence, lowest first: the mode default,
the stack's own field, the stack's `eval:`/`prod:` override, the environment (registered
RADIANCE_* knobs, RADIANCE_SPEC, RADIANCE_CHAT_TEMPLATE). Everything a launch reads from disk is
checked here, so `--dry-run` fails on the same bad inputs a real launch would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radiance import paths, spec_methods
from radiance.checkpoint import CheckpointError, method_problem, read_config
from radiance.kernels.build import arch_flags, kernel_dir
from radiance.knobs import KNOBS, checkall_shapes
from radiance.launcher import plan_checks
from radiance.launcher.cache_key import Versions, cache_key, detect_versions
from radiance.locations import StackPaths, stack_paths
from radiance.launcher.mounts import Mount, container_mounts
from radiance.stack import MODES, PLUGIN_METHODS, Stack, StackFile, StackFileError
from radiance.launcher.template import BoundTemplate, TemplateError, bind_file, bundled_template

STACK_SPEC = "stack"  # "use the stack's `spec` field"

# The one home of the eval/prod defaults (docs/stack-file.md describes them).
MODE_DEFAULTS: dict[str, dict[str, Any]] = {
    # correctness gating: eager (CHECKALL needs it), 32K context, no drafter, no prefix cache
    "eval": {"enforce_eager": True, "max_model_len": 32768, "prefix_caching": False, "spec": 0, "checkall": True},
    # serving: compiled graphs, the model's full context, prefix caching, the drafter at `spec`
    "prod": {"enforce_eager": False, "max_model_len": "full", "prefix_caching": True, "spec": STACK_SPEC,
             "checkall": False},
}

# Knobs read by the launcher itself; they are not handed on to vLLM.
LAUNCHER_ONLY_KNOBS = frozenset({"RADIANCE_STACKS", "RADIANCE_CHAT_TEMPLATE", "RADIANCE_SPEC",
                                 "RADIANCE_REQUIRE_ALL", "RADIANCE_PQ_HIPCC_FLAGS", "RADIANCE_KERNEL_DIR"})


class PlanError(ValueError):
    """The stack cannot be launched as resolved; the message names the file/key or variable."""


@dataclass(frozen=True)
class LaunchPlan:
    stack: str
    stack_file: Path
    mode: str
    arch: str
    runtime: str
    image: str | None
    container: str
    quant: str
    model: Path
    served_name: str
    host: str
    port: int
    tp: int
    devices: tuple[int, ...]
    dtype: str
    kv_cache_dtype: str
    enforce_eager: bool
    max_model_len: int | None  # None: the model's full context
    prefix_caching: bool
    spec: int
    drafter_method: str | None
    drafter_model: Path | None
    drafter_options: tuple[tuple[str, Any], ...]
    chat_template: Path | None  # handed to vLLM as --chat-template (None: the model's own)
    template: BoundTemplate | None  # what vLLM will apply, named in the log and the dry run
    max_num_seqs: int | None
    gpu_memory_utilization: float | None
    env: tuple[tuple[str, str], ...]  # stack/mode env and knobs, sorted; argv.py adds the derived ones
    extra_args: tuple[str, ...]
    cache_key: str
    compile_dir: Path
    kernel_cache: Path
    kernel_flags: tuple[str, ...]
    # where build_kernels puts (or finds) this device's kernels; None: nothing to build, or NVIDIA,
    # whose entry is keyed at build time by the checkpoint's linear shapes (launch.build_step)
    kernel_dir: Path | None
    mounts: tuple[Mount, ...]
    versions: Versions

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)


def _pick(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _check_model(sf: StackFile, stack: Stack, model: Path, key: tuple[str, ...], quant: str | None) -> None:
    """quant: the stack's method, whose checkpoint format the model must have (None: any, a drafter)."""
    loc = ("stacks", stack.name, *key)
    if not model.is_dir():
        raise sf.error(f"model dir {model} does not exist (relative names live under $RADIANCE_HOME/models = "
                       f"{paths.models_dir()}); fetch/quantize it, `radiance setup` it from its `source`, or fix the "
                       "path", *loc)
    try:
        config = read_config(model)
    except CheckpointError as e:
        raise sf.error(str(e), *loc) from None
    if quant is not None and (problem := method_problem(model, config, quant)):
        raise sf.error(problem, *loc)


def _template(sf: StackFile, stack: Stack, sp: StackPaths, mode: str) -> BoundTemplate | None:
    """The chat template vLLM will apply. A quantized stack serving in prod names it (a path, or
    `model` for the checkpoint's own, chosen knowingly): which template is bound moves benchmark
    scores, so an unset one there is refused rather than left to the checkpoint."""
    loc = ("stacks", stack.name, "chat_template")
    origin = sp.chat_template_origin
    if sp.chat_template is not None:
        try:
            return bind_file(sp.chat_template, origin)
        except TemplateError as e:
            if origin == "env":
                raise TemplateError(f"RADIANCE_CHAT_TEMPLATE: {e}; fix the path or unset it") from None
            raise TemplateError(f"{sf.where(*loc)}: {'.'.join(loc)}: {e}; "
                                "fix the path (there is no fallback to the model's bundled template)") from None
    if not origin and mode == "prod" and stack.quant != "none":
        raise sf.error("unset, but a quantized stack in prod mode names its chat template (which one is bound "
                       "moves benchmark scores): give a .jinja path, or `model` to serve the checkpoint's bundled "
                       "template knowingly", *loc)
    try:
        bundled = bundled_template(sp.model, origin)
    except TemplateError as e:
        raise sf.error(str(e), *loc) from None
    if bundled is None and origin == "model":
        raise sf.error(f"`model`, but {sp.model} bundles no chat template (no chat_template.jinja, and no "
                       "chat_template in tokenizer_config.json or chat_template.json); give a .jinja path", *loc)
    return bundled


def _vllm_runs_here(stack: Stack) -> bool:
    """Whether this interpreter's vLLM is the one that will serve: not for a podman stack planned on
    the host (its image's vLLM is checked when the launcher runs inside the container)."""
    from radiance.launcher.launch import in_container  # launch sequences the plan: imported late

    return stack.runtime != "podman" or in_container()


def _spec(stack: Stack, mode_spec: Any, environ: Mapping[str, str]) -> int:
    raw = environ.get("RADIANCE_SPEC")
    if raw not in (None, ""):
        try:
            spec = int(raw)  # type: ignore[arg-type]
        except ValueError:
            raise PlanError(f"RADIANCE_SPEC={raw!r} is not a whole number; unset it or give 0..16") from None
        if not 0 <= spec <= 16:
            raise PlanError(f"RADIANCE_SPEC={spec} is outside 0..16")
        if spec and stack.drafter is None:
            raise PlanError(f"RADIANCE_SPEC={spec} but stack {stack.name!r} has no `drafter`")
        return spec
    return stack.spec if mode_spec == STACK_SPEC else int(mode_spec)


def _knob_env(stack: Stack, mode: str, checkall: bool, enforce_eager: bool,
              environ: Mapping[str, str]) -> dict[str, str]:
    ov = stack.mode(mode)
    env = {**stack.env, **ov.env}
    if checkall and stack.check_shapes:
        env["RADIANCE_PQ_CHECKALL"] = ",".join(stack.check_shapes)
    for k, v in environ.items():  # the environment wins for every registered knob
        if k in KNOBS and k not in LAUNCHER_ONLY_KNOBS:
            env[k] = v
    env["RADIANCE_HOME"] = str(paths.home())  # the plugin and probes find caches/state through it
    if env.get("RADIANCE_PQ_CHECKALL") and not enforce_eager:
        raise PlanError(f"RADIANCE_PQ_CHECKALL is set but stack {stack.name!r} runs compiled graphs in {mode} "
                        "mode; CHECKALL needs eager (use --mode eval or unset it)")
    return env


def resolve_plan(sf: StackFile, name: str, mode: str, environ: Mapping[str, str],
                 versions: Versions | None = None) -> LaunchPlan:
    """The plan for stack `name` in `mode`. Raises StackFileError / PlanError / TemplateError."""
    stack = sf.get(name)
    if mode not in MODES:
        raise PlanError(f"mode {mode!r}: allowed values are {', '.join(MODES)}")
    ov, d = stack.mode(mode), MODE_DEFAULTS[mode]
    enforce_eager = _pick(ov.enforce_eager, d["enforce_eager"])
    max_len = _pick(ov.max_model_len, d["max_model_len"])
    spec = _spec(stack, _pick(ov.spec, d["spec"]), environ)
    checkall = _pick(ov.checkall, d["checkall"])
    env = _knob_env(stack, mode, checkall, enforce_eager, environ)

    sp: StackPaths = stack_paths(sf, stack, environ)
    _check_model(sf, stack, sp.model, ("model",), stack.quant)
    max_num_seqs = _pick(ov.max_num_seqs, stack.max_num_seqs, 0) or None
    plugin = stack.quant in PLUGIN_METHODS
    problem = plan_checks.decode_band(stack.arch, plugin, spec, max_num_seqs, env)
    if problem:
        raise sf.error(f"{mode} mode: {problem}", "stacks", name, "max_num_seqs")
    gated = env.get("RADIANCE_PQ_CHECKALL")
    if gated and plugin:
        try:
            shapes = checkall_shapes(gated)  # the stack's check_shapes are validated with the file
        except ValueError as e:
            raise PlanError(str(e)) from None
        if problem := plan_checks.gated_shapes(shapes, sp.model, stack.quant):
            if environ.get("RADIANCE_PQ_CHECKALL"):
                raise PlanError(f"RADIANCE_PQ_CHECKALL: {problem}")
            raise sf.error(problem, "stacks", name, "check_shapes")
    drafter_model = sp.drafter if spec else None
    if drafter_model is not None:
        _check_model(sf, stack, drafter_model, ("drafter", "model"), None)
    if spec and stack.drafter is not None and _vllm_runs_here(stack):
        try:
            problem = spec_methods.check_installed(stack.drafter.method, spec_methods.installed())
        except spec_methods.SpecMethodsError as e:
            problem = f"cannot tell which speculative methods the installed vLLM accepts: {e}"
        if problem:
            raise sf.error(f"{mode} mode: {problem}", "stacks", name, "drafter", "method")
    if problem := plan_checks.int8_activations(stack.arch, env):
        if environ.get("RADIANCE_PQ_I8"):
            raise PlanError(f"RADIANCE_PQ_I8 (environment): {problem}")
        raise sf.error(problem, "stacks", name, *(("env",) if "RADIANCE_PQ_I8" in stack.env else (mode, "env")))
    template = _template(sf, stack, sp, mode)

    try:
        flags = arch_flags(stack.arch)  # from the knobs in this process's environment
    except ValueError as e:
        raise PlanError(str(e)) from None
    versions = versions or detect_versions()
    key = cache_key(sp.model, paths.models_dir(), versions, env)
    compile_dir = sp.compile_root / key
    nvidia = stack.vendor == "nvidia"
    kernel_cache = compile_dir / "kernels" if nvidia else sp.kernel_cache  # NVIDIA: beside the Triton cache it fills
    builds = stack.quant in PLUGIN_METHODS and not nvidia
    return LaunchPlan(
        stack=name, stack_file=sp.stack_file, mode=mode, arch=stack.arch, runtime=stack.runtime,
        image=stack.image, container=stack.container_name, quant=stack.quant, model=sp.model,
        served_name=stack.model_name,
        host="0.0.0.0" if stack.runtime == "podman" else (stack.host or "127.0.0.1"),
        port=stack.port, tp=stack.tp, devices=tuple(stack.devices), dtype=stack.dtype,
        kv_cache_dtype=stack.kv_cache_dtype, enforce_eager=enforce_eager,
        max_model_len=None if max_len == "full" else int(max_len),
        prefix_caching=_pick(ov.prefix_caching, d["prefix_caching"]), spec=spec,
        drafter_method=stack.drafter.method if spec and stack.drafter else None,
        drafter_model=drafter_model,
        drafter_options=tuple(sorted(stack.drafter.options.items())) if spec and stack.drafter else (),
        chat_template=sp.chat_template, template=template,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=_pick(ov.gpu_memory_utilization, stack.gpu_memory_utilization, 0.0) or None,
        env=tuple(sorted(env.items())), extra_args=tuple(stack.extra_args) + tuple(ov.extra_args),
        cache_key=key, compile_dir=compile_dir, kernel_cache=kernel_cache,
        kernel_flags=flags, kernel_dir=kernel_dir(stack.arch, kernel_cache, flags) if builds else None,
        mounts=container_mounts(sp) if stack.runtime == "podman" else (), versions=versions,
    )


__all__ = ["MODE_DEFAULTS", "LaunchPlan", "PlanError", "StackFileError", "TemplateError", "resolve_plan"]
