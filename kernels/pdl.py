"""Programmatic dependent launch (PDL, sm_90+) for the decode linears: the GEMM is launched while
its activation pass (pq2's quantizer, paroquant's rotation prologue) still runs, and waits for it
with `griddepcontrol.wait` at its top, so its own launch latency hides behind the pass.

Only the launch: the GEMM does nothing before the wait. Work done there lost or tied on the H200:
the program's weights prefetched into L2 per thread or by the TMA unit (both slower than waiting at
the top), its first step's loads (a tie). Arithmetic is
unchanged, so outputs are bit-identical with and without it. Where it loses (paroquant's split-8 and
16-token tiles, pq2's planes) the tables leave the launch serial. Off below sm_90 (the instructions
do not exist there). RADIANCE_PDL (KernelConfig.pdl): `auto` (default) on where the GPU has it,
`on` requires it, `off`.
"""

from __future__ import annotations

KNOB = "RADIANCE_PDL"


def enabled(capability: tuple[int, int], mode: str) -> bool:
    """Whether the decode linears launch their GEMM dependent on the activation pass on a GPU of
    this capability (the tables then say which tiles do); `mode` as kernels/config.py checked it."""
    if mode == "on" and capability < (9, 0):
        raise ValueError(f"{KNOB}=on: programmatic dependent launch needs sm_90+, this GPU is "
                         f"sm_{capability[0]}{capability[1]}; use auto or off")
    return mode != "off" and capability >= (9, 0)
