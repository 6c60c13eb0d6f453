"""Every RADIANCE_* environment knob, in one table.

docs/knobs.md is generated from it (`python -m radiance.knobs > docs/knobs.md`; tests/test_docs.py
checks it). Each knob says what it keys: `graph` -- it changes what vLLM/inductor traces, so the
launcher's compile-cache key carries it (a warm cache would replay a graph built for other code);
`kernels` -- it changes which kernels the launcher builds or warms (kernels/config.py reads it at
load), so the kernel-build key carries it; neither -- nothing cached depends on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


KEYS = ("", "graph", "kernels", "graph+kernels")


@dataclass(frozen=True)
class Knob:
    name: str
    default: str | None
    keys: str  # what it keys (KEYS): the compile cache (graph), the kernel build (kernels), both, nothing
    doc: str
    suffix: str = ""  # cache-key suffix used when a graph knob is set away from its default

    def __post_init__(self) -> None:
        if self.keys not in KEYS:
            raise ValueError(f"{self.name}: keys={self.keys!r}, use one of {KEYS}")

    @property
    def graph(self) -> bool:
        """Changes the compiled graph: part of the compile-cache key."""
        return "graph" in self.keys

    @property
    def kernels(self) -> bool:
        """Changes which kernels are built or warmed: part of the kernel-build key."""
        return "kernels" in self.keys


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in [
        Knob("RADIANCE_HOME", "~/.cache/radiance", "",
             "Root of everything radiance downloads or builds: models, pip cache, kernel and compile caches, state files."),
        Knob("RADIANCE_CACHE", None, "",
             "Root of the rebuildable caches (`kernels/`, `compile/`); unset: `$RADIANCE_HOME`. The system layout (`radiance render --system`) uses `/var/cache/radiance`."),
        Knob("RADIANCE_STACKS", None, "",
             "Stack file used when `--stacks` is not given (default: `$RADIANCE_HOME/stacks.yaml`, else the bundled example)."),
        Knob("RADIANCE_REQUIRE_ALL", None, "",
             "`1`: tests that need a missing system tool fail instead of skipping (`.ci/run` sets it; so does `CI=true`)."),
        Knob("RADIANCE_PQ_SKIP", None, "",
             "Extra comma-separated regexes of module names left unquantized (bf16), on top of the checkpoint's own list."),
        Knob("RADIANCE_PQ_CHECKALL", None, "",
             '`"N:K,N:K"`: compare the kernel path with the exact fp32 dequant reference on those shapes and log rel error per call. Eval mode only (needs eager).'),
        Knob("RADIANCE_PQ_CHECK_MAX_M", "128", "",
             "Row cap for `RADIANCE_PQ_CHECKALL` comparisons."),
        Knob("RADIANCE_PQ_CHECK_MAX_CALLS", None, "",
             "Checked calls per layer for `RADIANCE_PQ_CHECKALL` (zero-input calls not counted); unset: every call. Bounds the judge's cost on CPU."),
        Knob("RADIANCE_CPU_WEIGHTS", "folded", "",
             "CPU path: `folded` runs each linear as one GEMM in the activations' dtype (vLLM's own CPU GEMM), paroquant's rotation and channel scales folded into the dequantized weight at load (pq2: its int8 activation quantization, then a GEMM on the dequantized ternary weight); `int4` keeps paroquant's codes in 4 bits for vLLM's CPU int4 GEMM and rotates the activations per call (a quarter of the weight memory; pq2 runs folded; needs vLLM's AVX-512 kernels and 16-bit activations, else the launch is refused naming the fix); both are the reference's numbers up to rounding. `fp32` / `int8` run the exact reference itself, bit for bit (the dequantized weight cached in fp32, or the int8 codes rebuilt per call)."),
        Knob("RADIANCE_PQ_DECODE_MAX_M", "64", "kernels",
             "Top of the decode (split-K GEMV) band. Must cover `max_num_seqs x (SPEC+1)` rows (a verify batch; the launcher refuses a GPU stack whose batches do not fit); at most 64 on gfx1201, whose decode kernel takes no more."),
        Knob("RADIANCE_DISABLED_KERNELS", None, "kernels",
             "Comma-separated kernels never to plan (docs/nvidia.md has which rows each serves): the next kernel in "
             "the method's priority order takes their rows, and a layer no kernel can serve fails at load naming "
             "them. NVIDIA paroquant: `paroquant.mma_gl`, `.gemv_gl`, `.gemv`, `.wgmma`, `.scratch`, `.deqt`, "
             "`.deq`, `.fold`; MXFP4-PARO: `paroquant_mxfp4.deqt`, `.deq`; pq2: `pq2.dp4a`, `.gluon`, `.gluon_ws`, `.gluon_wgmma`, `.planes`, `.legacy`; "
             "unquantized linears: `dense.skinny`, `dense.cublas`. gfx1201: `paroquant.hip_decode`, `.hip_prefill`, "
             "`paroquant_mxfp4.hip_decode`, `.hip_prefill`, `dense.hipblas`. An unknown name is an error. For A/B runs and "
             "for working around a kernel on one card, as vLLM's `VLLM_DISABLED_KERNELS`."),
        Knob("RADIANCE_CHAT_TEMPLATE", None, "",
             "Chat template (`.jinja`) for `radiance-launch`, overriding the stack's `chat_template` (prefixed, so podman's `--env 'RADIANCE_*'` carries it into a container). Missing or unreadable fails the launch."),
        Knob("RADIANCE_SPEC", None, "",
             "Speculative tokens for `radiance-launch`, overriding the mode's `spec`; `0` turns the drafter off."),
        Knob("RADIANCE_PQ_HIPCC_FLAGS", None, "kernels",
             "Extra compiler flags for the gfx1201 kernel build (e.g. `-O2`, `-save-temps`); part of the kernel-cache key."),
        Knob("RADIANCE_PQ_WPERM", "1", "kernels",
             "gfx1201 weight layout (paroquant int4 and MXFP4 codes): `1` WMMA fragment order, `0` plain `[N, K/8]` words. Compiled into the kernels (`-DPQ_WPERM`), so it keys the kernel build; the loader refuses a library built the other way."),
        Knob("RADIANCE_KERNEL_DIR", None, "",
             "Set by `radiance-launch` for vLLM on gfx1201: the directory holding the HIP library built for this device (unset elsewhere: NVIDIA kernels live in `TRITON_CACHE_DIR`)."),
        Knob("RADIANCE_PQ_ROT_STREAM", "0", "graph+kernels",
             "Compiled (prod) runs of `paroquant` / `paroquant_mxfp4` (NVIDIA, gfx1201) and `pq2` (NVIDIA): `1` fuses each RMSNorm (with its residual add) into the prologue (pq2: the activation quantizer) of the linear it feeds, one kernel writing the activations the GEMM reads (NVIDIA paroquant: at one row per step, pq2 up to 16; gfx1201: every row). A graph pass, so it keys the compile cache; eager runs are unchanged. Off by default: on the H200 neither paroquant's nor pq2's was measured faster end to end, and on gfx1201 it has run only emulated (the example gfx1201 stacks carry it commented out: docs/producers.md). `1` on the CPU is an error.", "-rs"),
        Knob("RADIANCE_PQ_ROT_STREAM2", "0", "graph+kernels",
             "Like `RADIANCE_PQ_ROT_STREAM`, for silu(gate) * up before each MLP down projection (NVIDIA: up to 16 rows per step; gfx1201: every row). Off by default (docs/producers.md).", "-rs2"),
        Knob("RADIANCE_PQ_I8", "0", "graph+kernels",
             "NVIDIA sm_80+: W4A8 (int8 per-group activations, int8 tensor-core GEMM) instead of W4A16; on the H200 faster at M = 8..16 (W4A16's tensor-core decode leads at M = 2..4 on most shapes), slower from M = 64 and in prefill. gfx1201 has no int8 activation path (its kernels run fp8 x fp8 WMMA): the launch plan refuses the knob there.", "-i8"),
        Knob("RADIANCE_MXFP4_FP8", "0", "graph+kernels",
             "NVIDIA sm_89+: serve `paroquant_mxfp4` as W4A8 (e4m3 activations per row and 128-group, fp8 tensor-core GEMM) instead of W4A16; `1` below sm_89 is an error at load. gfx1201 runs MXFP4 as fp8 x fp8 either way.", "-mxf8"),
        Knob("RADIANCE_PQ_SCRATCH_ROWS", "0", "kernels",
             "NVIDIA paroquant scratch path: weight rows dequantized per piece (a multiple of 128). Each piece is dequantized on a side stream while the GEMM of the piece before it runs, and the scratch holds two pieces instead of the whole largest weight; `0` = the whole weight at once. A memory knob, not a speed one: pieces cost a few percent of prefill time on the H200; with 4096 rows a 27B gate_up's scratch is 84 MB instead of 356 MB."),
        Knob("RADIANCE_PDL", "auto", "kernels",
             "NVIDIA decode linears: launch the GEMM while its activation pass (pq2 quantizer, paroquant prologue) still runs, waiting for it in the kernel (programmatic dependent launch). `auto` on sm_90+, `on` requires it (an error below sm_90), `off` never. Bit-identical either way; on the H200 faster at pq2 M = 1 and on paroquant's split ≤ 4 tiles; split-8 tiles lose, so they never use it."),
    ]
}


def knob(name: str) -> str | None:
    """Current value of a knob: the environment, else its default. Unknown names are a bug."""
    if name not in KNOBS:
        raise KeyError(f"{name} is not a radiance knob; add it to radiance/knobs.py (docs/knobs.md is generated)")
    return os.environ.get(name, KNOBS[name].default)


def knob_int(name: str) -> int:
    raw = knob(name)
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name}={raw!r} is not an integer; unset it or give a whole number") from None


def checkall_shapes(raw: str) -> set[tuple[int, int]]:
    """RADIANCE_PQ_CHECKALL's value, "N:K,N:K", as {(N, K)}; a ValueError names the value."""
    shapes = set()
    for item in raw.split(","):
        n, sep, k = item.strip().partition(":")
        if not (sep and n.isdigit() and k.isdigit()):
            raise ValueError(f"RADIANCE_PQ_CHECKALL={raw!r}: expected comma-separated N:K pairs, e.g. 1152:896,896:4864")
        shapes.add((int(n), int(k)))
    return shapes


def graph_suffix(env: dict[str, str] | None = None) -> str:
    """Cache-key suffix from the graph-changing knobs set away from their defaults."""
    env = os.environ if env is None else env
    parts = []
    for k in sorted(KNOBS.values(), key=lambda k: k.name):
        if k.graph and k.name in env and env[k.name] != (k.default or ""):
            parts.append(k.suffix or f"-{k.name.removeprefix('RADIANCE_').lower()}={env[k.name]}")
    return "".join(parts)


def page() -> str:
    """docs/knobs.md: every knob, its default, what it keys, what it does."""
    keyed = {"": "nothing", "graph": "compile cache", "kernels": "kernel build",
             "graph+kernels": "compile cache, kernel build"}
    rows = [f"| `{k.name}` | {f'`{k.default}`' if k.default is not None else 'unset'} | "
            f"{keyed[k.keys]} | {k.doc} |" for k in KNOBS.values()]
    return "\n".join([
        "# Knobs", "",
        "Every `RADIANCE_*` environment variable radiance reads. Generated from `radiance/knobs.py` by "
        "`python -m radiance.knobs > docs/knobs.md`; do not edit by hand. *Keys*: what a change of the knob "
        "rebuilds. *compile cache*: the knob changes what vLLM and inductor trace, so `radiance-launch` keeps "
        "a separate compile cache per value (a warm cache never replays a graph built for other code). "
        "*kernel build*: the knob changes which kernels are built or warmed (the plugin reads it once, at "
        "load), so the kernel cache keeps an entry per value. Stack files set knobs per stack or mode (`env:`).",
        "", "| knob | default | keys | what it does |", "|---|---|---|---|", *rows]) + "\n"


if __name__ == "__main__":
    print(page(), end="")
