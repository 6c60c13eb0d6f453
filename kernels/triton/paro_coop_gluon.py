"""The rotation prologue inside the decode GEMM (`paro_mma_gluon` with COOP): one launch per linear.

Why: at decode a rotated linear was two launches, the prologue and then the GEMM, and the GEMM
could not start its weight stream before the whole prologue grid had finished. Here the GEMM's own
programs do the prologue's work: each program takes tickets from an atomic counter, and ticket j < P
x G is the job "rotate group j % G of rotated copy j // G" (all M <= 8 rows): paro_rotate's
arithmetic (channel scale, then the Givens layers as a gather within a warp), written in the F16GF
order the MMA reads, then a flag set with release semantics. A program's activation copies wait
on the flag of their group (acquire) -- after its weight copies are in flight, so the rotation
overlaps the weight stream instead of preceding it.

No deadlock: a job is taken only by a running program, which finishes it before it waits on any
flag, and every program takes tickets until they run out before its first wait. The counters reset
themselves: the last program to finish (a second counter) zeroes the flags and both counters, so
the next launch (and every CUDA-graph replay) starts from zero. SYNC = [ticket, done, flag per job].
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from radiance.kernels.triton.gluon_compat import thread_barrier

SPIN_LIMIT = gl.constexpr(1 << 22)  # polls before a waiting program gives up (a bug then shows as wrong numbers, not a hang)


@gluon.jit
def rotate_job(X, stride_xm, PARTNER, COS, SSIN, CS, A16, S, RS, SYNC, j, M, K, G,
               KROT: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr):
    # job j: rows 0..M-1 (M <= BT = 8) of group j % G through rotated copy j // G into A16 [P, M, K]
    # (F16GF), S and RS [P, G, 8]; then its flag. The 128 channels span one warp (4 per lane), so the gather stays
    # in the warp (shuffles); rows go across warps.
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WARPS, 1], [1, 0])
    g = j % G
    p = j // G
    rows = gl.arange(0, BT, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, L))
    rmask = rows < M
    kk = g * 128 + cols
    x = gl.load(X + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None], other=0.0).to(gl.float32)
    x = x * gl.load(CS + p * K + kk)[None, :]
    for layer in gl.static_range(KROT):
        tab = (p * KROT + layer) * K + kk
        idx = gl.load(PARTNER + tab)[None, :] + gl.zeros([BT, 128], gl.int32, layout=L)
        xp = gl.gather(x, idx, 1)
        x = x * gl.load(COS + tab)[None, :] + xp * gl.load(SSIN + tab)[None, :]
    # F16G (paro_rotate.store_group): the power of two putting the group's amax in [2^14, 2^15)
    amax = gl.max(gl.abs(x), axis=1)
    se = gl.maximum(((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 14, 1)
    scale = (se << 23).to(gl.float32, bitcast=True)
    q = (x * ((254 - se) << 23).to(gl.float32, bitcast=True)[:, None]).to(gl.float16)
    rsum = gl.sum(q.to(gl.float32), axis=1)
    r = cols % 64  # F16GF: channel 16q + 4i + p1 + 2e + 64p0 at 32q + 8i + 4p1 + 2p0 + e
    pos = g * 128 + 32 * (r // 16) + 8 * ((r % 16) // 4) + 4 * (r % 2) + 2 * (cols // 64) + (r % 4) // 2
    gl.store(A16 + (p * M + rows)[:, None] * K + pos[None, :], q, mask=rmask[:, None])
    sg = j * 8 + rows  # S, RS [P, G, 8]: a job's values in one 32-byte sector (paro_mma_gluon reads them via L1)
    gl.store(S + sg, scale, mask=rmask)
    gl.store(RS + sg, scale * rsum, mask=rmask)
    thread_barrier()  # every thread's stores issued before the one release below publishes them
    gl.atomic_xchg(SYNC + 2 + j, 1, sem="release")


@gluon.jit
def take_jobs(X, stride_xm, PARTNER, COS, SSIN, CS, A16, S, RS, SYNC, JOBS, M, K, G,
              KROT: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr):
    # rotation jobs until the tickets run out (each program takes at least one ticket)
    t = gl.atomic_add(SYNC, 1, sem="relaxed")
    while t < JOBS:
        rotate_job(X, stride_xm, PARTNER, COS, SSIN, CS, A16, S, RS, SYNC, t, M, K, G, KROT, BT, WARPS)
        t = gl.atomic_add(SYNC, 1, sem="relaxed")


@gluon.jit
def _poll(ptr):
    # a plain acquire load: hundreds of programs polling with atomic read-modify-writes would queue
    # at the flag's L2 slice behind each other and before the release they wait for
    return gl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _pause():
    return gl.inline_asm_elementwise("nanosleep.u32 64; mov.b32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False,
                                     pack=1)


@gluon.jit
def wait_job(SYNC, j, WARPS: gl.constexpr):
    # until job j's flag is set; every thread acquires it itself (its activations, scales and sums
    # are visible to the copies it issues next)
    L1: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    ptr = SYNC + 2 + j + gl.zeros([1], gl.int32, layout=L1)
    f = gl.max(_poll(ptr), axis=0)
    n = 0
    while (f == 0) & (n < SPIN_LIMIT):
        _pause()
        f = gl.max(_poll(ptr), axis=0)
        n += 1


@gluon.jit
def finish_jobs(SYNC, JOBS, WARPS: gl.constexpr):
    # the program's last act: the last one to get here (every wait of every program is behind it)
    # zeroes the flags and both counters for the next launch
    thread_barrier()
    nprog = gl.num_programs(0) * gl.num_programs(1) * gl.num_programs(2)
    if gl.atomic_add(SYNC + 1, 1, sem="acq_rel") == nprog - 1:
        L1: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
        for j0 in range(0, JOBS + 2, 32 * WARPS):
            j = j0 + gl.arange(0, 32 * WARPS, layout=L1)
            gl.store(SYNC + j, gl.zeros([32 * WARPS], gl.int32, layout=L1), mask=j < JOBS + 2)
