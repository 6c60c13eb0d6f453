"""Every knob the kernels read, resolved once from the environment at load (`KernelConfig.from_knobs`)
and stored on each prepared layer (kernels/linear.PreparedLinear.config, and the layer structs of
the platform modules). Nothing under kernels/ reads the environment after that: a call reads the
layer's config, so a layer behaves as it was planned whatever the environment does later, and a
benchmark or test that wants other knobs prepares its layer with another config.

Each value is checked here, naming the knob and what it takes; which cards a knob needs (W4A8's
int8 dots, fp8, PDL) is checked where the layer is planned for its card.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from radiance.knobs import knob, knob_int

PDL_MODES = ("auto", "on", "off")
CPU_WEIGHTS = ("folded", "int4", "fp32", "int8")


@dataclass(frozen=True)
class KernelConfig:
    decode_max_m: int = 64  # RADIANCE_PQ_DECODE_MAX_M: top of the decode (split-K) band
    disabled: frozenset[str] = frozenset()  # RADIANCE_DISABLED_KERNELS: kernel names never planned
    i8: bool = False  # RADIANCE_PQ_I8: paroquant W4A8 on NVIDIA
    mxfp4_fp8: bool = False  # RADIANCE_MXFP4_FP8: paroquant_mxfp4 W4A8 (fp8) on NVIDIA
    scratch_rows: int = 0  # RADIANCE_PQ_SCRATCH_ROWS: weight rows per dequantized piece (0: all)
    pdl: str = "auto"  # RADIANCE_PDL
    norm_producer: bool = False  # RADIANCE_PQ_ROT_STREAM: RMSNorm fused into the linear after it
    silu_mul_producer: bool = False  # RADIANCE_PQ_ROT_STREAM2: silu-mul fused into the down projection
    cpu_weights: str = "folded"  # RADIANCE_CPU_WEIGHTS
    wperm: bool = True  # RADIANCE_PQ_WPERM: gfx1201's weight layout (must match the built library)
    kernel_dir: str | None = None  # RADIANCE_KERNEL_DIR: where gfx1201's HIP library was built
    interpret: bool = False  # TRITON_INTERPRET=1: Triton's CPU interpreter (no Gluon, no inline PTX)

    @property
    def producers(self) -> tuple[bool, bool]:
        """(norms, silu-mul): the fused producers asked for."""
        return self.norm_producer, self.silu_mul_producer

    @classmethod
    def from_knobs(cls) -> KernelConfig:
        """The knobs' current values (radiance/knobs.py), checked."""
        scratch = knob_int("RADIANCE_PQ_SCRATCH_ROWS")
        if scratch < 0 or scratch % 128:
            raise ValueError(f"RADIANCE_PQ_SCRATCH_ROWS={scratch}: use 0 (the whole weight at once) or a positive "
                             "multiple of 128 (weight rows per dequantized piece)")
        pdl = knob("RADIANCE_PDL") or "auto"
        if pdl not in PDL_MODES:
            raise ValueError(f"RADIANCE_PDL={pdl!r}: use auto, on or off")
        cpu = knob("RADIANCE_CPU_WEIGHTS")
        if cpu not in CPU_WEIGHTS:
            raise ValueError(f"RADIANCE_CPU_WEIGHTS={cpu!r}: use folded (one GEMM per linear, the fast path), int4 "
                             "(4x smaller weights, vLLM's int4 GEMM), or the exact reference's fp32 or int8")
        raw = knob("RADIANCE_DISABLED_KERNELS") or ""
        return cls(decode_max_m=knob_int("RADIANCE_PQ_DECODE_MAX_M"),
                   disabled=frozenset(n.strip() for n in raw.split(",") if n.strip()),
                   i8=_switch("RADIANCE_PQ_I8"), mxfp4_fp8=_switch("RADIANCE_MXFP4_FP8"), scratch_rows=scratch,
                   pdl=pdl, norm_producer=knob("RADIANCE_PQ_ROT_STREAM") == "1",
                   silu_mul_producer=knob("RADIANCE_PQ_ROT_STREAM2") == "1", cpu_weights=cpu,
                   wperm=knob("RADIANCE_PQ_WPERM") == "1", kernel_dir=knob("RADIANCE_KERNEL_DIR") or None,
                   interpret=os.environ.get("TRITON_INTERPRET") == "1")


# the knob each field is read from (the docs' "keys the kernel build" column is checked against it)
KNOB_OF = {"decode_max_m": "RADIANCE_PQ_DECODE_MAX_M", "disabled": "RADIANCE_DISABLED_KERNELS", "i8": "RADIANCE_PQ_I8",
           "mxfp4_fp8": "RADIANCE_MXFP4_FP8", "scratch_rows": "RADIANCE_PQ_SCRATCH_ROWS", "pdl": "RADIANCE_PDL",
           "norm_producer": "RADIANCE_PQ_ROT_STREAM", "silu_mul_producer": "RADIANCE_PQ_ROT_STREAM2",
           "cpu_weights": "RADIANCE_CPU_WEIGHTS", "wperm": "RADIANCE_PQ_WPERM", "kernel_dir": "RADIANCE_KERNEL_DIR",
           "interpret": "TRITON_INTERPRET"}
assert set(KNOB_OF) == {f.name for f in fields(KernelConfig)}


def _switch(name: str) -> bool:
    raw = knob(name) or "0"
    if raw not in ("0", "1"):
        raise ValueError(f"{name}={raw!r}: use 0 or 1")
    return raw == "1"


def needs_card(name: str, on: bool, cap: tuple[int, int], min_cap: tuple[int, int], needs: str, otherwise: str) -> bool:
    """A 0/1 knob that asks for a path only some cards have: an error naming the knob on a card below
    min_cap (never a quiet fallback to the path it did not ask for)."""
    if on and cap < min_cap:
        raise ValueError(f"{name}=1 needs {needs} (sm_{min_cap[0]}{min_cap[1]}+); this GPU is sm_{cap[0]}{cap[1]}. "
                         f"Unset {name} to serve {otherwise}")
    return on
