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


def replayed_on_new_input(call, x, new):
    """(eager output on x, the output of a CUDA graph of `call` replayed after x.copy_(new), eager
    output on the new x). The graph is captured after a warm-up on a side stream, as vLLM captures;
    a kernel that launched off the capture stream or baked an allocation into the graph shows as
    replayed != eager-on-new, one that ignored its input as replayed == the first eager output."""
    import torch

    eager = call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = call()
    x.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    return eager, y, call()

