"""Offline check for the register-A wgmma race (found in paroquant's wgmma kernel): a Gluon kernel that keeps
an asynchronous wgmma with its A operand in registers in flight must not let anything rewrite those
registers before the `wgmma.wait_group` that retires it -- ptxas does not protect them, and Triton
frees a value once Python no longer uses it. This reads SASS and reports every instruction that
writes an A register of an HGMMA / IGMMA group still in flight; a loop body is walked twice, so a
write at the top of the next pass (the race that was found) counts.

    python3 bench/wgmma_hazard.py paro 256,128,8,3      # paro_wgmma: bm tokens, bn rows, warps, ring
    python3 bench/wgmma_hazard.py pq2 64,128,4,4
    python3 bench/wgmma_hazard.py kernel.sass           # any SASS listing (nvdisasm -c)

Compiling needs the device's Triton (3.6.0, unpacked on PYTHONPATH, as bench/sass_count.py).
"""

from __future__ import annotations

import argparse
import re
import sys

_INST = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+):")


def _instructions(sass: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    insts, labels = [], {}
    for line in sass.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            labels[m.group(1)] = len(insts)
        m = _INST.search(line)
        if m:
            insts.append((m.group(1), m.group(2)))
    return insts, labels


def _written(op: str, args: str) -> set[str]:
    """Registers an instruction writes (its first operand, widened by .64 / .128 / .WIDE)."""
    if op.startswith(("ST", "BAR", "BRA", "EXIT", "RED", "ATOM", "WARPGROUP", "DEPBAR", "LDGDEPBAR", "HGMMA", "IGMMA")):
        return set()
    m = re.match(r"(R\d+)\b", args)
    if not m:
        return set()
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    base = int(m.group(1)[1:])
    return {f"R{base + i}" for i in range(width)}


def scan(sass: str) -> list[str]:
    """Every write to an in-flight wgmma's A registers, as 'index: instruction' lines."""
    insts, labels = _instructions(sass)
    loops = []
    for i, (op, args) in enumerate(insts):
        m = re.search(r"`\((\.L_x_\d+)\)", args)
        if op.startswith("BRA") and m and labels.get(m.group(1), i + 1) <= i:
            loops.append((labels[m.group(1)], i))
    order = list(range(len(insts)))
    for start, end in loops:  # each loop body a second time, right after the first
        at = order.index(end) + 1
        order[at:at] = list(range(start, end + 1))
    groups: list[set[str]] = []  # committed groups, oldest first
    open_group: set[str] = set()
    found = []
    for i in order:
        op, args = insts[i]
        if op.startswith(("HGMMA", "IGMMA")):
            m = re.match(r"R\d+,\s+(R\d+),", args)
            if m:  # A in registers: four of them per lane (64 x 16 fp16 / 64 x 32 int8)
                base = int(m.group(1)[1:])
                open_group |= {f"R{base + j}" for j in range(4)}
            if "gsb0" in args:
                groups.append(open_group)
                open_group = set()
            continue
        if op.startswith("WARPGROUP.DEPBAR"):
            keep = int(re.search(r"0x([0-9a-f]+)", args).group(1), 16)
            groups = groups[len(groups) - keep:] if keep else []
            continue
        live = set().union(open_group, *groups)
        hit = _written(op, args) & live
        if hit:
            found.append(f"{i}: {op} {args}  (writes {', '.join(sorted(hit))} of an in-flight wgmma)")
    return found


def _compile(which: str, tile: str) -> str:
    import os
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    bt, bn, warps, ring = map(int, tile.split(","))
    if which == "paro":
        from radiance.kernels.triton.paro_wgmma import paro_wgmma_f16 as fn
        sig = {"A": "*fp16", "W": "*i32", "SC": "*fp16", "D": "*i8", "Y": "*bf16", "BIAS": "*fp32", "M": "i32",
               "N": "i32", "K": "i32", "G": "i32", "pb1": "i32", "pb2": "i32"}
        const = {"BN": bn, "BT": bt, "WARPS": warps, "RING": ring, "HAS_BIAS": False}
    else:
        from radiance.kernels.triton.pq2_gluon_wgmma import pq2_wgmma as fn
        sig = {"Q": "*i8", "S": "*fp32", "T": "*i32", "W": "*i32", "WS": "*fp16", "Y": "*bf16", "M": "i32",
               "N": "i32", "K": "i32", "G": "i32"}
        const = {"BN": bn, "BT": bt, "WARPS": warps, "RING": ring}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if sig[n].startswith("*") or n in ("N", "K")}
    src = GluonASTSource(fn=fn, constexprs=const, attrs=attrs, signature={**sig, **{k: "constexpr" for k in const}})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    nvd = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        return subprocess.run([nvd, "-c", f.name], capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", help="paro | pq2 | a SASS file")
    ap.add_argument("tile", nargs="?", default="256,128,8,3", help="tokens,rows,warps,ring")
    args = ap.parse_args()
    sass = open(args.what).read() if args.what not in ("paro", "pq2") else _compile(args.what, args.tile)
    found = scan(sass)
    print("\n".join(found) if found else "no write to an in-flight wgmma's A registers")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
