"""The stack file: one YAML file, many stacks, validated by a pydantic schema.

`load_stacks(path)` is the only reader; deploy (units, vllm-switch) and the launcher both call it.
Errors are `StackFileError`s that name the file, the line, the key and what is allowed, because the
person reading them is editing that YAML file. Nothing here touches the filesystem beyond reading
the file itself: whether a model dir exists is the launch plan's business (plan.py), so host tools
can read stacks whose models live on another machine.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from radiance import paths
from radiance.arch import vendor  # noqa: F401 -- re-exported: the schema's callers say stack.vendor
from radiance.kernels import methods
from radiance.kernels.methods import CHECKPOINT_METHODS
from radiance.knobs import knob
from radiance.spec_methods import check_name as _drafter_method, model_rule
from radiance.stack_fields import (BindHost, ContainerName, EnvMap, ExtraArgs, ImageRef, OptionValue, ServedName,
                                   Text)
from radiance.stack_yaml import StackFileError, line_for, read_yaml

Arch = Literal["cpu", "gfx1201", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
Runtime = Literal["podman", "native"]


# radiance's own methods (served by its vLLM plugin: kernels/methods); the others are vLLM's, for
# baselines: `none` serves an unquantized checkpoint, `awq_marlin` an AWQ one on vLLM's Marlin /
# Machete kernels (GPU), `awq` the same on vLLM's default AWQ kernel (its int4 CPU GEMM on CPU).
# Each maps to the checkpoint's quantization_config.quant_method the stack expects (None: unquantized)
PLUGIN_METHODS = CHECKPOINT_METHODS
VLLM_METHODS = {"none": None, "awq": "awq", "awq_marlin": "awq"}
CHECKPOINT_METHOD = {**{m: methods.get(m).checkpoint for m in PLUGIN_METHODS}, **VLLM_METHODS}
QuantMethod = Literal[tuple(CHECKPOINT_METHOD)]  # type: ignore[valid-type]
DrafterMethod = Annotated[str, AfterValidator(_drafter_method)]  # radiance/spec_methods.py METHODS
BUNDLED_TEMPLATE = "model"  # `chat_template: model`: the checkpoint's own template, chosen knowingly
Mode = Literal["eval", "prod"]
MODES: tuple[str, ...] = ("eval", "prod")

STACK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # it becomes part of unit/container names
SHAPE_RE = re.compile(r"^[1-9][0-9]*:[1-9][0-9]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Drafter(_Strict):
    """The speculative-decoding drafter; used only where the mode's `spec` is above 0."""

    method: DrafterMethod = "draft_model"
    model: Text | None = None
    source: Text | None = None  # where `radiance setup` places `model` from (deploy/place.py)
    options: dict[Text, OptionValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _model_needed(self) -> Drafter:
        if problem := model_rule(self.method, bool(self.model)):
            raise ValueError(problem)
        if self.source and not self.model:
            raise ValueError("`source` says where to place `model` from; this drafter has no `model`")
        return self


class ModeOverrides(_Strict):
    """Per-mode settings; anything left out takes the mode's default (plan.MODE_DEFAULTS)."""

    enforce_eager: bool | None = None
    max_model_len: int | Literal["full"] | None = Field(default=None)
    prefix_caching: bool | None = None
    spec: int | None = Field(default=None, ge=0, le=16)
    checkall: bool | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    env: EnvMap = Field(default_factory=dict)
    extra_args: ExtraArgs = Field(default_factory=list)

    @field_validator("max_model_len")
    @classmethod
    def _len(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 256:
            raise ValueError("max_model_len is a token count (>= 256) or 'full'")
        return v


class Stack(_Strict):
    """One servable configuration: which model, on what, how. The YAML key is its name."""

    description: Text = ""
    arch: Arch
    runtime: Runtime = "native"
    image: ImageRef | None = None
    model: Text
    source: Text | None = None  # where `radiance setup` places `model` from (deploy/place.py)
    quant: QuantMethod
    served_name: ServedName | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    drafter: Drafter | None = None
    spec: int = Field(default=0, ge=0, le=16)
    devices: list[int] = Field(default_factory=list)
    tp: int = Field(default=1, ge=1, le=8)
    host: BindHost | None = None
    port: int = Field(ge=1, le=65535)
    container: ContainerName | None = None
    cache_dir: Text | None = None
    chat_template: Text | None = None
    check_shapes: list[str] = Field(default_factory=list)
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    start_timeout_s: int | None = Field(default=None, ge=10)
    api_key_file: Text | None = None
    env: EnvMap = Field(default_factory=dict)
    extra_args: ExtraArgs = Field(default_factory=list)
    eval: ModeOverrides = Field(default_factory=ModeOverrides)
    prod: ModeOverrides = Field(default_factory=ModeOverrides)

    _name: str = PrivateAttr(default="")

    @property
    def name(self) -> str:
        return self._name

    @property
    def container_name(self) -> str:
        return self.container or f"radiance-{self._name}"

    @property
    def vendor(self) -> str:
        return vendor(self.arch)

    @property
    def model_name(self) -> str:
        """The name vLLM serves the model under (`--served-model-name`), which probes ask for."""
        return self.served_name or self._name

    def mode(self, mode: str) -> ModeOverrides:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: allowed values are {', '.join(MODES)}")
        return self.eval if mode == "eval" else self.prod

    @field_validator("check_shapes")
    @classmethod
    def _shapes(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if not SHAPE_RE.match(s)]
        if bad:
            raise ValueError(f"check_shapes entries are 'N:K' (output:input features), got {bad}")
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[int]) -> list[int]:
        if any(d < 0 for d in v) or len(set(v)) != len(v):
            raise ValueError(f"devices are distinct GPU indices >= 0, got {v}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        if self.runtime == "podman" and not self.image:
            raise ValueError("runtime 'podman' needs `image` (the container image to run)")
        if self.runtime == "native" and self.image:
            raise ValueError("`image` is only used with runtime 'podman'; remove it or set runtime: podman")
        if self.runtime == "podman":
            mounted = {"model": self.model, "drafter.model": self.drafter and self.drafter.model,
                       "cache_dir": self.cache_dir, "chat_template": self.chat_template}
            for key, p in mounted.items():
                if p and (":" in p or "," in p):
                    raise ValueError(f"{key} {p!r}: a podman stack's paths are bind mounts (`-v SRC:DST:ro`), "
                                     f"which cannot hold ':' or ','; move or rename it")
        if self.arch == "cpu":
            if self.devices:
                raise ValueError("arch 'cpu' takes no `devices` (GPU indices)")
        else:
            if not self.devices:
                raise ValueError(f"arch {self.arch!r} needs `devices` (the GPU indices it uses)")
            if self.tp > len(self.devices):
                raise ValueError(f"tp={self.tp} needs at least {self.tp} devices, got {self.devices}")
        if self.check_shapes and self.quant not in PLUGIN_METHODS:
            raise ValueError(f"check_shapes gates radiance's kernels; quant {self.quant!r} runs vLLM's own")
        for where, spec in (("spec", self.spec), ("eval.spec", self.eval.spec), ("prod.spec", self.prod.spec)):
            if spec and self.drafter is None:
                raise ValueError(f"{where}={spec} needs a `drafter`")
        return self


class StackFile(_Strict):
    """The whole file: `version` and the `stacks` map (name -> stack)."""

    version: Literal[1] = 1
    stacks: dict[str, Stack] = Field(json_schema_extra={"propertyNames": {"pattern": STACK_NAME_RE.pattern}})

    _path: Path | None = PrivateAttr(default=None)
    _lines: dict[tuple, int] = PrivateAttr(default_factory=dict)

    @field_validator("stacks")
    @classmethod
    def _names(cls, v: dict[str, Stack]) -> dict[str, Stack]:
        for name in v:
            if not STACK_NAME_RE.match(name):
                raise ValueError(f"stack name {name!r}: use lowercase letters, digits, '-' and '_' (it names units and containers)")
        return v

    def model_post_init(self, _ctx: Any) -> None:
        for name, stack in self.stacks.items():
            stack._name = name

    @property
    def path(self) -> Path | None:
        return self._path

    def get(self, name: str) -> Stack:
        if name not in self.stacks:
            known = ", ".join(sorted(self.stacks)) or "(none)"
            raise StackFileError(f"{self._path}: no stack named {name!r}; stacks in this file: {known}")
        return self.stacks[name]

    def where(self, *loc: str | int) -> str:
        """`file:line` of the deepest key of `loc` that the file has (for error messages)."""
        return f"{self._path}:{line_for(self._lines, loc)}"

    def error(self, message: str, *loc: str | int) -> StackFileError:
        return StackFileError(f"{self.where(*loc)}: {'.'.join(map(str, loc))}: {message}")


# ---- loading ----------------------------------------------------------------------------------

def _describe(err: dict, model_fields: list[str] | None) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
        if model_fields:
            msg += f"; allowed keys here: {', '.join(model_fields)}"
    elif err["type"] == "missing":
        msg = "required key is missing"
    elif "input" in err and err["type"] not in ("value_error",) and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return msg


def _fields_at(loc: tuple) -> list[str] | None:
    """Field names of the schema object that holds the last key of `loc` (for 'unknown key')."""
    model: type[BaseModel] = StackFile
    parts = list(loc[:-1])
    i = 0
    while i < len(parts):
        p = parts[i]
        if model is StackFile and p == "stacks":
            model, i = Stack, i + 2  # skip the stack name
            continue
        ann = model.model_fields.get(str(p))
        if ann is None:
            return None
        sub = {"drafter": Drafter, "eval": ModeOverrides, "prod": ModeOverrides}.get(str(p))
        if sub is None:
            return None
        model, i = sub, i + 1
    return list(model.model_fields)


def parse_stacks(text: str, path: Path) -> StackFile:
    """Validate stack-file text; `path` is only used in messages."""
    data, lines = read_yaml(text, path)
    try:
        sf = StackFile.model_validate(data)
    except ValidationError as e:
        msgs = []
        for err in e.errors():
            # pydantic appends the failing validator's name ('function-after[...]') for model checks
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p == "[key]")))
            dotted = ".".join(map(str, loc)) or "(top level)"
            msg = _describe(err, _fields_at(loc) if err["type"] == "extra_forbidden" else None)
            msgs.append(f"{path}:{line_for(lines, loc)}: {dotted}: {msg}")
        raise StackFileError("\n".join(msgs)) from None
    sf._path = path
    sf._lines = lines
    return sf


def default_stacks_path() -> Path:
    """`RADIANCE_STACKS`, else `$RADIANCE_HOME/stacks.yaml` if it exists, else the bundled example."""
    explicit = knob("RADIANCE_STACKS")
    if explicit:
        return Path(explicit).expanduser()
    mine = paths.home() / "stacks.yaml"
    return mine if mine.exists() else bundled_example()


def bundled_example() -> Path:
    """deploy/stacks.example.yaml, installed with the radiance.deploy package: located, not imported
    (the stack schema depends on no other package of radiance)."""
    deploy = importlib.util.find_spec("radiance.deploy")
    return Path(next(iter(deploy.submodule_search_locations))) / "stacks.example.yaml"


def load_stacks(path: str | Path | None = None) -> StackFile:
    """Read and validate a stack file (default: default_stacks_path()). Raises StackFileError."""
    path = Path(path) if path is not None else default_stacks_path()
    try:
        text = path.read_text()
    except OSError as e:
        raise StackFileError(f"{path}: cannot read the stack file: {e.strerror or e}; "
                             "give one with --stacks or RADIANCE_STACKS") from None
    return parse_stacks(text, path)
