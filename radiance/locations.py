"""Where a stack's files are: the one place stack-file path fields become absolute paths.

Relative `model` / `drafter.model` live under $RADIANCE_HOME/models, a relative `cache_dir` under
$RADIANCE_HOME, a relative `chat_template` beside the stack file; `~` is expanded. A podman stack
gets kernel and compile caches of its own (`paths.stack_cache_dir`): its container can write
only those, so no stack can plant a kernel another stack loads. Pure path
arithmetic: whether the files exist is checked by the launch plan, so host tools (unit rendering)
can call this for models that are not downloaded yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from radiance import paths
from radiance.stack import BUNDLED_TEMPLATE, Stack, StackFile


@dataclass(frozen=True)
class StackPaths:
    stack_file: Path
    model: Path
    drafter: Path | None
    compile_root: Path  # compile caches: one keyed directory per checkpoint/versions/knobs below it
    kernel_cache: Path
    state: Path
    launch_records: Path  # the launcher's own state records: the only state a container may write
    chat_template: Path | None  # a .jinja handed to vLLM (None: unset, or the model's bundled one)
    chat_template_origin: str  # "stack" | "env" | "model" (`chat_template: model`) | "" (unset)
    api_key_file: Path | None = None  # the server's API key (relative = beside the stack file)


def _under(base: Path, p: str) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else base / q


def model_path(model: str) -> Path:
    return _under(paths.models_dir(), model)


def stack_paths(sf: StackFile, stack: Stack, environ: Mapping[str, str]) -> StackPaths:
    stack_file = Path(sf.path or "stacks.yaml").expanduser().absolute()
    tmpl_env = environ.get("RADIANCE_CHAT_TEMPLATE")
    if tmpl_env:
        template, origin = Path(tmpl_env).expanduser().absolute(), "env"
    elif stack.chat_template == BUNDLED_TEMPLATE:
        template, origin = None, "model"
    elif stack.chat_template:
        template, origin = _under(stack_file.parent, stack.chat_template), "stack"
    else:
        template, origin = None, ""
    own = paths.stack_cache_dir(stack.name) if stack.runtime == "podman" else paths.cache_root()
    return StackPaths(
        stack_file=stack_file,
        model=model_path(stack.model),
        drafter=model_path(stack.drafter.model) if stack.drafter and stack.drafter.model else None,
        compile_root=_under(paths.home(), stack.cache_dir) if stack.cache_dir else own / "compile",
        kernel_cache=own / "kernels",
        state=paths.state_dir(),
        launch_records=paths.state_dir() / "launch",
        chat_template=template,
        chat_template_origin=origin,
        api_key_file=_under(stack_file.parent, stack.api_key_file) if stack.api_key_file else None,
    )
