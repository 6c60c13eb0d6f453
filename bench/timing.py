"""Timing shared by the device benchmarks: CUDA-graph replay medians and the copy roofline."""

from __future__ import annotations

import datetime
import statistics

import torch


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
    after warming the clocks: the issue's roofline. On the lent H200 it measured 2.70-2.76 TB/s in
    every run (RESULTS runs 1-22), warm or not, while cuBLAS reads bf16 weights at 3.9-4.1 TB/s and
    bench/floor.py's streaming reads reach 4.3: a copy-based roofline is ~1.45x a read-only one
    (RESULTS "Two rooflines")."""
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        w @ w  # noqa: B018 -- warm the clocks
    a = torch.randn(1 << 28, device="cuda")
    b = torch.empty_like(a)
    us = min(graph_time([lambda: b.copy_(a)] * 4, iters=10) for _ in range(3))
    return 2 * (1 << 30) / (us * 1e-6)


def run_header() -> tuple[str, str, float]:
    """(date, GPU, copy bandwidth) of one benchmark call, printed as its first line; rows carry the
    first two, rooflines come from the third (the better of two copies)."""
    dev = torch.cuda.get_device_properties(0)
    gpu = f"{dev.name} sm_{dev.major}{dev.minor} {dev.multi_processor_count} SMs"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    bw = max(copy_bandwidth(), copy_bandwidth())
    print(f"# {date} {gpu} torch {torch.__version__} copy {bw / 1e9:.0f} GB/s", flush=True)
    return date, gpu, bw
