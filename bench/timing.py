"""Timing shared by the device benchmarks: CUDA-graph replay medians and the streaming-read roofline."""

from __future__ import annotations

import datetime
import itertools
import statistics

import torch
import triton
import triton.language as tl


def graph_time(fns, iters: int = 20) -> float:
    """Median µs per call of fns (a rotation over weight copies) replayed in one CUDA graph:
    launch overhead removed, so kernels are compared, not Python launchers."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / len(fns))
    del g
    return statistics.median(ts)


def copy_bandwidth() -> float:
    """Read + write bytes per second of a 1 GiB fp32 device copy in a CUDA graph, best of three
    after warming the clocks: the issue's roofline. On the H200 it measures 2.70-2.76 TB/s, warm or
    not, while cuBLAS reads bf16 weights at 3.9-4.1 TB/s and bench/floor.py's streaming reads reach
    4.3: a copy-based roofline is ~1.45x a read-only one."""
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        w @ w  # noqa: B018 -- warm the clocks
    a = torch.randn(1 << 28, device="cuda")
    b = torch.empty_like(a)
    us = min(graph_time([lambda: b.copy_(a)] * 4, iters=10) for _ in range(3))
    return 2 * (1 << 30) / (us * 1e-6)


def read_bandwidth(nbytes: int = 1 << 30, copies: int = 2) -> float:
    """Bytes per second of the fastest streaming read (READ_TILES) over `copies` buffers of random
    words (nbytes in all, many times L2), after warming the clocks: the rooflines' bandwidth. A
    copy counts its writes too and lands ~1.45x lower on the H200; cuBLAS bf16 at M = 1 on a
    356 MB weight reads within a few % of this."""
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        w @ w  # noqa: B018 -- warm the clocks
    bufs = [torch.empty(nbytes // copies // 4, dtype=torch.int32, device="cuda").random_() for _ in range(copies)]
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    us, _ = best_read(bufs, out)
    return nbytes // copies / (us * 1e-6)


def run_header() -> tuple[str, str, float]:
    """(date, GPU, read bandwidth) of one benchmark call, printed as its first line; rows carry the
    first two, rooflines come from the third (the better of two measurements)."""
    dev = torch.cuda.get_device_properties(0)
    gpu = f"{dev.name} sm_{dev.major}{dev.minor} {dev.multi_processor_count} SMs"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    bw = max(read_bandwidth(), read_bandwidth())
    print(f"# {date} {gpu} torch {torch.__version__} streaming read {bw / 1e9:.0f} GB/s "
          f"(copy {copy_bandwidth() / 1e9:.0f} GB/s, read + write)", flush=True)
    return date, gpu, bw


# (16-byte vectors per step, steps per program, warps): every step's load is issued before the xor
READ_TILES = list(itertools.product((256, 512, 1024), (1, 2, 4, 8), (4, 8)))


@triton.jit
def stream_read(W, OUT, n_vec, CHUNK: tl.constexpr, STEPS: tl.constexpr):
    # W read once as [CHUNK, 4] int32 tiles (one 16-byte load per thread and step); the xor keeps
    # every load live, one word per program is written
    v = tl.program_id(0) * (CHUNK * STEPS) + tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK, 4], tl.int32)
    for s in tl.static_range(STEPS):
        o = v + s * CHUNK
        acc ^= tl.load(W + o[:, None] * 4 + tl.arange(0, 4)[None, :], mask=o[:, None] < n_vec, other=0)
    tl.store(OUT + tl.program_id(0), tl.xor_sum(tl.xor_sum(acc, 1), 0))


def read_fn(buf: torch.Tensor, out: torch.Tensor, tile):
    chunk, steps, warps = tile
    n_vec = buf.numel() // 4
    grid = (triton.cdiv(n_vec, chunk * steps),)
    return lambda: stream_read[grid](buf, out, n_vec, CHUNK=chunk, STEPS=steps, num_warps=warps)


def best_read(bufs: list[torch.Tensor], out: torch.Tensor) -> tuple[float, tuple]:
    """The fastest READ_TILES entry reading the copies in `bufs` (one per layer copy) in turn."""
    times = {t: graph_time([read_fn(b, out, t) for b in bufs]) for t in READ_TILES}
    tile = min(times, key=times.get)
    return times[tile], tile

