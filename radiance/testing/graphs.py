"""CUDA-graph checks the GPU tests share (imported only where a GPU runs them)."""

from __future__ import annotations


def assert_back_to_back(calls, want, what: str, replays: int = 3) -> None:
    """Capture `calls` (each returning a fresh output) back to back in one CUDA graph, replay it
    `replays` times, and require every output bit-identical to `want` after each replay. Each
    call's temporaries land in memory the call before it freed, so a kernel that reads a producer's
    output before that producer finished reads the previous call's data and fails here."""
    import torch

    for f in calls:
        f()  # compiled before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ys = [f() for f in calls]
    for _ in range(replays):
        g.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(y, w) for y, w in zip(ys, want, strict=True)), what


def replayed(call, replays: int = 3):
    """`call`'s output after capturing it in a CUDA graph (warmed on a side stream first, as vLLM
    captures) and replaying the graph `replays` times."""
    import torch

    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = call()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return y
