"""Offline look at what a paroquant GEMM kind compiles to for sm_90, without the device: the
TTGIR layout conversions inside the loop and the SASS instruction mix (loads by width, barriers,
shared-memory traffic). Pointer and N/K arguments are marked 16-divisible as Triton's launcher
specializes them at run time (without that the weight loads come out as 32-bit, not 128-bit).

    python3 bench/probes/sass_count.py gemv BN=16 GPI=4 --warps 2 --stages 1
    python3 bench/probes/sass_count.py gemv_gl R=2 GPI=2 PREFETCH=1 --warps 2 --sm 86

Use the device's Triton (3.6.0: the wheel in the package mirror, unpacked on PYTHONPATH); another
version compiles other code. Needs nvdisasm (Triton's bundled one is used).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # bench/: the probes share its helpers

import argparse
import collections
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget

from radiance.kernels.triton import paro_gemm
from radiance.testing.offline_compile import cuda_tool, resource_usage

SIG = {"A": "*fp32", "S": "*fp32", "RS": "*fp32", "W": "*i32", "SC": "*fp16", "D": "*i8", "Y": "*bf16",
       "BIAS": "*fp32", "PART": "*fp32", "CNT": "*i32", "M": "i32", "N": "i32", "K": "i32", "G": "i32",
       "pb1": "i32", "pb2": "i32", "gps": "i32", "SPLIT": "i32"}
DEFAULTS = {"BM": 1, "BN": 16, "A_INT8": False, "NS": 1, "HAS_BIAS": False}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=sorted(paro_gemm.KERNELS) + ["gemv_gl"])
    ap.add_argument("consts", nargs="*", help="NAME=int constexprs (BM, BN, GPI, NS, A_INT8, HAS_BIAS)")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--all", action="store_true", help="print every opcode's count")
    ap.add_argument("--sm", type=int, default=90, help="compute capability to compile for (75, 86, 90)")
    ap.add_argument("--maxnreg", type=int, default=0, help="register cap per thread (0: the compiler's choice)")
    args = ap.parse_args()
    if args.kind == "gemv_gl":
        from triton.experimental.gluon._runtime import GluonASTSource

        from radiance.kernels.triton.paro_gemv_gluon import paro_gemv_gl
        fn, source, const = paro_gemv_gl, GluonASTSource, {"MR": 1, "R": 2, "GPI": 1, "WARPS": args.warps, "PREFETCH": 1,
                                                          "WDEPTH": 1, "RING": 0,
                                                          "HAS_BIAS": False}
    else:
        fn, source = paro_gemm.KERNELS[args.kind], triton.compiler.ASTSource
        const = dict(DEFAULTS, NS=args.stages, **({"GPI": 1} if args.kind == "gemv" else {}),
                     **({"ASM": 1} if "ASM" in fn.arg_names else {}))
    for c in args.consts:
        name, value = c.split("=")
        const[name] = int(value)
    sig = {n: SIG[n] for n in fn.arg_names if n in SIG}  # the kernel's own argument order
    if args.kind not in ("gemv", "gemv_gl"):
        sig["W"] = "*u8"
        sig["A"] = "*i8" if const["A_INT8"] else "*fp16"
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n].startswith("*") or n in ("N", "K")}
    src = source(fn=fn, constexprs=const, attrs=attrs, signature={**sig, **{k: "constexpr" for k in const}})
    k = triton.compile(src, target=GPUTarget("cuda", args.sm, 32), options={"num_warps": args.warps, "num_stages": args.stages,
                                                                      **({"maxnreg": args.maxnreg} if args.maxnreg else {})})
    ttgir = k.asm["ttgir"]
    loop = ttgir[ttgir.find("scf.for"):ttgir.find("scf.yield")]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        sass = subprocess.run([cuda_tool("nvdisasm"), "-c", f.name], capture_output=True, text=True, check=True).stdout
    usage = " ".join(f"{name}:{n}" for name, n in resource_usage(k.asm["cubin"]).items())
    ops = collections.Counter(m.group(1).split(".")[0]
                              for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
    loads = collections.Counter(re.findall(r"LDG\.E[.\w]*", sass))
    print(f"triton {triton.__version__} {args.kind} {const} warps={args.warps} stages={args.stages}")
    print(f"layout conversions in the loop (TTGIR): {loop.count('convert_layout')}; {usage}")
    print(f"SASS: {sum(ops.values())} instructions; global loads {dict(loads)}")
    print("      " + ", ".join(f"{o} {ops[o]}" for o in ("LOP3", "FFMA", "FADD", "I2F", "BAR", "STS", "LDS", "LDGSTS")))
    if args.all:
        print("      all: " + ", ".join(f"{o} {c}" for o, c in ops.most_common()))


if __name__ == "__main__":
    main()
