"""What the Gluon decode kernels of both families share: which program does which tile and groups,
and how a tile's result reaches the output.

A program's work is either a (token tile, column tile, split) cell of the grid (`program_tile`) or,
on a stream-K grid, a contiguous run of the (tile, group) steps (`stream_bounds` / `stream_tile` /
`stream_slot`); either way it ends in `finish_tile`: straight into Y when it is the tile's only
contributor, else its fp32 partial into a slot and an atomic ticket, the last contributor summing
the slots in order (a fixed order, so split-K results do not depend on timing).
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from radiance.kernels.triton.gluon_compat import thread_barrier


@gluon.jit
def rotated_copy(n0, pb1, pb2):
    # merged linears: which rotated activation copy the columns from n0 read (partition boundaries pb1, pb2)
    return (n0 >= pb1).to(gl.int32) + (n0 >= pb2).to(gl.int32)


@gluon.jit
def split_tile():
    # a split-K program's output tile: its ticket and partial index (grid axes 0 and 1; axis 2 splits K)
    return gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)


@gluon.jit
def wait_for_producer():
    # programmatic dependent launch (kernels/pdl.py, sm_90+): block until the kernel before this one
    # has finished and its writes are visible (a no-op when launched without the attribute)
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def program_tile(pb1, pb2, gps, G, BM: gl.constexpr, BN: gl.constexpr):
    # (first row, first column, split index, rotated copy, group range) of this program
    n0 = gl.program_id(1) * BN
    pid_k = gl.program_id(2)
    g0 = pid_k * gps
    return gl.program_id(0) * BM, n0, pid_k, rotated_copy(n0, pb1, pb2), g0, gl.minimum(g0 + gps, G)


@gluon.jit
def stream_bounds(M, N, G, BT: gl.constexpr, BN: gl.constexpr):
    # a stream-K program's share of the (output tile, group) steps, tile-major, token tiles fastest:
    # (token tiles, all steps, programs, this program, its first step, its end)
    n_tb = (M + BT - 1) // BT
    work = n_tb * ((N + BN - 1) // BN) * G
    progs = gl.num_programs(2)
    p = gl.program_id(2)
    return n_tb, work, progs, p, p * work // progs, (p + 1) * work // progs


@gluon.jit
def stream_tile(start, end, G, n_tb, BT: gl.constexpr, BN: gl.constexpr):
    # the tile holding step `start`: (its index, first token, first row, this program's groups of it)
    t = start // G
    return t, (t % n_tb) * BT, (t // n_tb) * BN, start - t * G, gl.minimum(G, end - t * G)


@gluon.jit
def stream_slot(t, G, work, progs, p):
    # (this program's partial slot in tile t, the tile's contributors: the programs holding its
    # first and last step)
    first = ((t * G + 1) * progs - 1) // work
    last = ((t + 1) * G * progs - 1) // work
    return p - first, last - first + 1


@gluon.jit
def store_tile(acc, Y, BIAS, PART, CNT, M, N, t0, n0, slot, count, tile, BN: gl.constexpr, BT: gl.constexpr,
               WARPS: gl.constexpr, HAS_BIAS: gl.constexpr):
    # an mma.sync decode kernel's [BN, BT] accumulator (rows n0.., tokens t0..) through finish_tile
    # (+ the rows' bias with HAS_BIAS; BIAS is not read without it)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    cols = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, MMA))
    toks = t0 + gl.arange(0, BT, layout=gl.SliceLayout(0, MMA))
    ymask = (cols < N)[:, None] & (toks < M)[None, :]
    if HAS_BIAS:
        bias = gl.load(BIAS + gl.minimum(cols, N - 1)).to(gl.float32)[:, None]
    else:
        bias = 0.0
    finish_tile(acc, bias, Y, PART, CNT, toks[None, :] * N + cols[:, None], ymask, M, N, slot, count, tile, HAS_BIAS)


@gluon.jit
def finish(y, bias, Y, PART, CNT, y_off, ymask, M, N, pid_k, SPLIT, HAS_BIAS: gl.constexpr):
    # y (+ bias) into Y; with split-K (split_finish.finish_tile's scheme) the partial into PART, an
    # atomic ticket per output tile, and the last program sums the partials in split order
    finish_tile(y, bias, Y, PART, CNT, y_off, ymask, M, N, pid_k, SPLIT, split_tile(), HAS_BIAS)


@gluon.jit
def finish_tile(y, bias, Y, PART, CNT, y_off, ymask, M, N, slot, count, tile, HAS_BIAS: gl.constexpr):
    # finish for output tile `tile`, to which `count` programs contribute: this one's partial in
    # slot `slot` (count 1: straight into Y)
    if count == 1:
        if HAS_BIAS:
            y += bias
        gl.store(Y + y_off, y.to(Y.dtype.element_ty), mask=ymask)
    else:
        gl.store(PART + slot * M * N + y_off, y, mask=ymask)
        # every warp's partial must be written before the one thread that takes the ticket
        # releases them (plain Triton places this barrier itself; Gluon does only what it is told)
        thread_barrier()
        ticket = gl.atomic_add(CNT + tile, 1, sem="acq_rel")
        if ticket == count - 1:
            tot = gl.zeros_like(y)
            for z in range(count):
                tot += gl.load(PART + z * M * N + y_off, mask=ymask, other=0.0, cache_modifier=".cg")
            if HAS_BIAS:
                tot += bias
            gl.store(Y + y_off, tot.to(Y.dtype.element_ty), mask=ymask)
            gl.atomic_xchg(CNT + tile, 0)
