"""What a checkpoint directory holds, read without torch or vLLM: config.json and its
quantization_config, the safetensors headers and the shard index, each checked against the others.

`radiance setup` runs `verify` on every checkpoint and drafter a stack names, so a downloaded one
(z-lab's, with no SHA256SUMS) is checked for what can be checked without loading it: a truncated
or garbled shard, an index naming a shard or tensor that is not there, a quantized linear whose
tensors do not fit its format, widths that disagree with config.json, a quant method other than the
stack's. Each problem names the file. The launch plan reads only config.json (`read_config`,
`method_problem`); the weights are vLLM's to load, and the plugin validates them again then.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

from radiance.kernels import methods
from radiance.kernels.formats import FormatError, check_format_version
from radiance.stack import CHECKPOINT_METHOD

INDEX = "model.safetensors.index.json"
# safetensors dtypes and their bytes per element; a tensor of another dtype is not size-checked
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header
GROUP = 128
# the linears whose input is the residual stream (K = hidden) and those writing it (N = hidden)
READS_HIDDEN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
WRITES_HIDDEN = ("o_proj", "down_proj")
NOT_TEXT = ("visual", "vision", "mtp")  # towers and heads of their own widths: not checked against hidden_size


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be read at all; the message names the file."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    shard: Path
    start: int  # byte range in the shard file
    end: int


def read_config(d: Path) -> dict:
    cfg = d / "config.json"
    try:
        config = json.loads(cfg.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{d} has no config.json: not a Hugging Face checkpoint directory") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{cfg} cannot be read as JSON: {e}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{cfg} is not a JSON object")
    return config


def method_problem(d: Path, config: dict, quant: str) -> str | None:
    """config.json's quant method against the stack's `quant` (None: they agree)."""
    found = (config.get("quantization_config") or {}).get("quant_method")
    want = CHECKPOINT_METHOD[quant]
    if found == want:
        return None
    what = "not quantized" if found is None else f"quantized as {found!r} (config.json quantization_config.quant_method)"
    return (f"{d} is {what} but the stack says quant: {quant}"
            + (f" (which serves quant_method {want!r} checkpoints)" if want not in (None, quant) else ""))


def read_header(shard: Path, data: bool = True) -> dict[str, Tensor]:
    """The tensors a safetensors file declares. data=True also checks that each tensor's bytes lie
    inside the file and match its shape and dtype (a truncated download fails here); the plan reads
    headers alone (data=False), which is all that shape-only test checkpoints have."""
    size = shard.stat().st_size
    with shard.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise CheckpointError(f"{shard}: {size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > min(size - 8, MAX_HEADER):
            raise CheckpointError(f"{shard}: its header claims {n} bytes but the file has {size}: not a safetensors "
                                  "file, or cut short")
        try:
            meta = json.loads(f.read(n))
        except ValueError:
            raise CheckpointError(f"{shard}: the header is not JSON: not a safetensors file, or damaged") from None
    out: dict[str, Tensor] = {}
    base = 8 + n
    for name, v in meta.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (base + int(x) for x in v["data_offsets"])
            t = Tensor(v["dtype"], tuple(int(x) for x in v["shape"]), shard, start, end)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{shard}: tensor {name}'s header entry is malformed: {v!r}") from None
        if data and not base <= t.start <= t.end <= size:
            raise CheckpointError(f"{shard}: tensor {name} ends at byte {t.end} but the file has {size}: "
                                  "the file is cut short (download it again)")
        if data and t.dtype in DTYPE_BYTES and t.end - t.start != math.prod(t.shape) * DTYPE_BYTES[t.dtype]:
            raise CheckpointError(f"{shard}: tensor {name} has {t.end - t.start} bytes for {t.dtype} {list(t.shape)}")
        out[name] = t
    return out


def linear_tensors(quant: str, n: int, k: int, krot: int = 8) -> dict[str, tuple[str, list[int]]]:
    """One linear's tensors in `quant`'s format (suffix -> (dtype, shape)), W being [N, K]: the
    shapes kernels/formats/*.py validate at load (kernels/methods), here without torch. A method
    that is not radiance's: an unquantized weight."""
    spec = methods.METHODS.get(quant)
    return (spec if spec is not None and spec.checkpoint else methods.get("dense")).shapes(n, k, krot)


def _nk(quant: str, tensors: dict[str, Tensor], mod: str) -> tuple[int, int] | None:
    """(N, K) of a quantized module from its code tensor; None when it is not one of `quant`'s."""
    spec = methods.get(quant)
    t = tensors.get(f"{mod}.{spec.codes}")
    if t is None or len(t.shape) != 2 or f"{mod}.{spec.marked_by}" not in tensors:
        return None
    return spec.nk(t.shape)


@dataclass
class Report:
    """What `verify` found: counts for the summary line, and every problem (empty: usable)."""

    shards: int = 0
    tensors: int = 0
    linears: int = 0  # quantized linears whose tensors were checked against the format
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.shards} safetensors shard(s), {self.tensors} tensors"
                + (f", {self.linears} quantized linears fit their format" if self.linears else "")
                + "".join(f"; {n}" for n in self.notes))


def _quant_config(d: Path, config: dict, quant: str, r: Report) -> int:
    """Checks quantization_config as the plugin reads it; returns krot (the rotation depth)."""
    qc = config.get("quantization_config") or {}
    where = f"{d / 'config.json'} quantization_config"
    try:
        check_format_version(qc, where)
    except FormatError as e:
        r.problems.append(str(e))
    if quant in methods.CHECKPOINT_METHODS:
        spec = methods.get(quant)
        got = (qc.get("bits"), qc.get("group_size"))
        if got != (spec.bits, spec.group_size):
            r.problems.append(f"{where}: {quant} reads bits={spec.bits}, group_size={spec.group_size}; "
                              f"it says bits={got[0]!r}, group_size={got[1]!r}")
    krot = qc.get("krot", 8)
    return krot if isinstance(krot, int) and 1 <= krot <= 8 else 8


def _linears(d: Path, config: dict, quant: str, krot: int, tensors: dict[str, Tensor], r: Report) -> None:
    text = config.get("text_config") or config
    hidden = text.get("hidden_size")
    mods = sorted({name.rsplit(".", 1)[0] for name in tensors})
    for mod in mods:
        nk = _nk(quant, tensors, mod)
        if nk is None:
            continue
        r.linears += 1
        n, k = nk
        for suffix, (dtype, shape) in linear_tensors(quant, n, k, krot).items():
            t = tensors.get(f"{mod}.{suffix}")
            if t is None:
                r.problems.append(f"{d}: {mod}.{suffix} is missing ({quant} linears carry it)")
            elif (t.dtype, list(t.shape)) != (dtype, shape):
                r.problems.append(f"{t.shard}: {mod}.{suffix} is {t.dtype} {list(t.shape)}, {quant} needs "
                                  f"{dtype} {shape} (N={n}, K={k}, krot={krot})")
        last = mod.rsplit(".", 1)[-1]
        if not isinstance(hidden, int) or any(part in mod for part in NOT_TEXT):
            continue
        if last in READS_HIDDEN and k != hidden:
            r.problems.append(f"{d}: {mod} reads K={k} features but config.json says hidden_size={hidden}")
        if last in WRITES_HIDDEN and n != hidden:
            r.problems.append(f"{d}: {mod} writes N={n} features but config.json says hidden_size={hidden}")


def _index(d: Path, headers: dict[Path, dict[str, Tensor]], r: Report) -> None:
    index = d / INDEX
    if not index.is_file():
        return
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        r.problems.append(f"{index}: not a safetensors index (no weight_map): {e}")
        return
    missing_shards = sorted({s for s in weight_map.values() if not (d / s).is_file()})
    for s in missing_shards:
        r.problems.append(f"{index} lists {s}, which is not in {d}")
    absent = [t for t, s in weight_map.items()
              if s not in missing_shards and t not in headers.get(d / s, {})]
    if absent:
        r.problems.append(f"{index}: {len(absent)} tensor(s) are not in the shard it names, e.g. "
                          f"{absent[0]} in {weight_map[absent[0]]}")


def verify(d: Path, quant: str | None = None) -> Report:
    """Everything checkable in checkpoint dir `d` without loading it. `quant`: the stack's method,
    whose format the linears must have (None: a drafter, any format). CheckpointError when `d`
    has no readable config.json; every other problem is listed in the report."""
    config = read_config(d)
    r = Report()
    if quant is not None:
        if problem := method_problem(d, config, quant):
            r.problems.append(problem)
        krot = _quant_config(d, config, quant, r)
    headers: dict[Path, dict[str, Tensor]] = {}
    for shard in sorted(d.glob("*.safetensors")):
        try:
            headers[shard] = read_header(shard)
        except CheckpointError as e:
            r.problems.append(str(e))
    tensors = {name: t for h in headers.values() for name, t in h.items()}
    r.shards, r.tensors = len(headers), len(tensors)
    _index(d, headers, r)
    if not headers and not r.problems:
        other = sorted(p.name for p in d.iterdir() if p.suffix in (".bin", ".pt", ".gguf"))
        if not other:
            r.problems.append(f"{d} holds no weights (no *.safetensors, *.bin or *.pt)")
        else:
            r.notes.append(f"weights in {', '.join(other[:3])}: only safetensors headers can be checked")
    if quant is not None and quant in methods.CHECKPOINT_METHODS:
        _linears(d, config, quant, krot, tensors, r)
        if not r.linears and tensors:
            r.problems.append(f"{d}: no linear is in {quant}'s format (config.json says {quant})")
    return r
