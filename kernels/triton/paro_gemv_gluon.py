"""The paroquant decode GEMV in Gluon: `paro_gemm`'s gemv algorithm with every layout stated.

Why Gluon: plain Triton picks each load's layout from its pointer's contiguity, so the activation
planes and the scales (broadcast over columns) came out in layouts other than the weight tile's
slices and were converted through shared memory, 9 barriers per loop step (bench/probes/sass_count.py);
the loop waited on those round trips, not on the weight stream. Here one 3-D layout L3 over
[GPI groups, BN columns, 16 words] (L4 minus its row axis) is the home of everything: the weights load in it, each
activation plane loads in its column slice (each thread fetches the 4 words' planes it needs,
the 8 lanes of a row share one transaction) and the scales in its word slice, so nothing moves
between threads until the final reduction.

The layout trick: a thread holds R consecutive columns x 4 consecutive words (one 16-byte load per
column), so every activation it loads is reused R times from registers, and MR rows of x
(M = 2..4 in one program) so every weight word it decodes is reused MR times. Weights of the next step
are loaded before this step's arithmetic (PREFETCH=1; 2 also the activations and scales). Deeper
weight pipelines -- WDEPTH steps ahead in registers, or a cp.async ring in shared memory -- were
timed on the H200 and did not win: more bytes in flight is not what this loop lacks.
Arithmetic as in paro_gemm: nibble -> 2^23 + c*16^s by OR-ing an exponent (exact), one subtract,
one FMA with the plane-ordered, pre-scaled activation (prologue mode ROT32P); per group
acc += sc * t and the zero point folds as sc * zp * RS / 16 per word (exact: a power of two) so
every term lives in the one layout. Split-K as `split_finish.finish_tile`:
partials to fp32 scratch, an atomic ticket, the last program sums in split order.
No tensor-core or sm_90-only instruction: plain loads, integer ops and FMAs.
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from radiance.kernels.triton.gluon_schedule import finish, program_tile


@gluon.jit
def _nibble_2p23(w, s: gl.constexpr):
    # (w & (15 << 4s)) | 0x4B000000 as fp32 = 2^23 + c * 16^s, in one LOP3 (ptxas emits two for the
    # plain expression)
    if s == 0:
        asm: gl.constexpr = "lop3.b32 $0, $1, 0x0000000F, 0x4B000000, 0xEA;"
    elif s == 1:
        asm: gl.constexpr = "lop3.b32 $0, $1, 0x000000F0, 0x4B000000, 0xEA;"
    elif s == 2:
        asm: gl.constexpr = "lop3.b32 $0, $1, 0x00000F00, 0x4B000000, 0xEA;"
    else:
        asm: gl.constexpr = "lop3.b32 $0, $1, 0x0000F000, 0x4B000000, 0xEA;"
    return gl.inline_asm_elementwise(asm, "=r,r", [w], dtype=gl.float32, is_pure=True, pack=1)


@gluon.jit
def _group_loads(W, SC, D, a_ptr, rs_ptr, g, glast, N, w_off, gn, WHAT: gl.constexpr):
    # one loop step's operands for groups g.. WHAT: 1 the weights only, 3 all but the weights,
    # otherwise everything. No masks: every index is clamped into the tensors (a prefetch past the
    # program's range reloads its last groups; rows past M and columns past N repeat the last one
    # and are never stored), so no predicates and no zero-filled registers per load.
    g = gl.minimum(g, glast)
    if WHAT != 3:
        w = gl.load(W + g * N * 16 + w_off)
    else:
        w = 0
    if WHAT == 1:
        return (w,)
    else:
        sc = gl.load(SC + g * N + gn).to(gl.float32)
        zp = gl.load(D + g * N + gn).to(gl.float32) + 8.0
        rs = gl.load(rs_ptr + g)
        a = a_ptr + g * 128
        return (w, sc, zp, rs, gl.load(a), gl.load(a + 16), gl.load(a + 32), gl.load(a + 48), gl.load(a + 64),
                gl.load(a + 80), gl.load(a + 96), gl.load(a + 112))


@gluon.jit
def paro_gemv_gl(A, RS, W, SC, D, Y, BIAS, PART, CNT, M, N, K, G, pb1, pb2, gps, SPLIT,
                 MR: gl.constexpr, R: gl.constexpr, GPI: gl.constexpr, WARPS: gl.constexpr,
                 PREFETCH: gl.constexpr, WDEPTH: gl.constexpr, HAS_BIAS: gl.constexpr):
    # PREFETCH: 0 loads at use, 1 the weights ahead, 2 also the activations and scales (one step);
    # the weights run WDEPTH steps ahead in registers.
    # axes: rows of x, K groups, output columns, weight words of a group
    L4: gl.constexpr = gl.BlockedLayout(size_per_thread=[MR, 1, R, 4], threads_per_warp=[1, 1, 8, 4],
                                        warps_per_cta=[1, 1, WARPS, 1], order=[3, 2, 1, 0])
    L3: gl.constexpr = gl.SliceLayout(0, L4)  # [GPI, BN, 16]: the weight words
    LGN: gl.constexpr = gl.SliceLayout(2, L3)  # [GPI, BN]: scales, zero points
    LA: gl.constexpr = gl.SliceLayout(2, L4)  # [MR, GPI, 16]: one activation plane
    LRS: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, L4))  # [MR, GPI]: group sums
    LY: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(3, L4))  # [MR, BN]: the output
    BN: gl.constexpr = R * 8 * WARPS
    m0, n0, pid_k, prt, g0, g1 = program_tile(pb1, pb2, gps, G, MR, BN)

    glast = g1 - GPI  # the host keeps gps a multiple of GPI
    gi = gl.arange(0, GPI, layout=gl.SliceLayout(1, LGN))
    cols = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, LGN)), N - 1)
    gn = gi[:, None] * N + cols[None, :]  # [GPI, BN] into SC, D
    w_off = gl.expand_dims(gn, 2) * 16 + gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3)))[None, None, :]
    ra = gl.minimum(m0 + gl.arange(0, MR, layout=gl.SliceLayout(1, gl.SliceLayout(2, LA))), M - 1)
    ga = gl.arange(0, GPI, layout=gl.SliceLayout(0, gl.SliceLayout(2, LA)))
    wa = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, LA)))
    a_ptr = A + prt * M * K + (ra * K)[:, None, None] + (ga * 128)[None, :, None] + wa[None, None, :]  # plane 0
    rr = gl.minimum(m0 + gl.arange(0, MR, layout=gl.SliceLayout(1, LRS)), M - 1)
    gr = gl.arange(0, GPI, layout=gl.SliceLayout(0, LRS))
    rs_ptr = RS + prt * M * G + rr[:, None] * G + gr[None, :]

    acc = gl.zeros([MR, GPI, BN, 16], gl.float32, layout=L4)
    if PREFETCH > 0:
        ws = ()
        for i in gl.static_range(WDEPTH):
            ws = ws + _group_loads(W, SC, D, a_ptr, rs_ptr, g0 + i * GPI, glast, N, w_off, gn, 1)
    if PREFETCH == 2:
        nxt = _group_loads(W, SC, D, a_ptr, rs_ptr, g0, glast, N, w_off, gn, 3)
    for g in range(g0, g1, GPI):  # the host keeps gps a multiple of GPI
        if PREFETCH > 0:  # issue the weight loads WDEPTH steps ahead, before this step's arithmetic
            w = ws[0]
            gw = g + WDEPTH * GPI
            ws = ws[1:] + _group_loads(W, SC, D, a_ptr, rs_ptr, gw, glast, N, w_off, gn, 1)
        else:
            w = _group_loads(W, SC, D, a_ptr, rs_ptr, g, glast, N, w_off, gn, 1)[0]
        if PREFETCH == 2:
            ops = nxt
            nxt = _group_loads(W, SC, D, a_ptr, rs_ptr, g + GPI, glast, N, w_off, gn, 3)
        else:
            ops = _group_loads(W, SC, D, a_ptr, rs_ptr, g, glast, N, w_off, gn, 3)
        sc, zp, rs = ops[1], ops[2], ops[3]
        wh = w >> 16
        t = gl.zeros([MR, GPI, BN, 16], gl.float32, layout=L4)
        for j in gl.static_range(8):
            if j < 4:
                src = w
            else:
                src = wh
            q = _nibble_2p23(src, j % 4) - 8388608.0  # decoded once, used by MR rows
            t += gl.expand_dims(q, 0) * gl.expand_dims(ops[4 + j], 2)
        sc4 = gl.expand_dims(gl.expand_dims(sc, 2), 0)
        zs4 = gl.expand_dims(gl.expand_dims(sc * zp, 2), 0)
        rs4 = gl.expand_dims(gl.expand_dims(rs * 0.0625, 2), 3)  # a 16th per word: exact
        acc += t * sc4 - zs4 * rs4
    y = gl.sum(gl.sum(acc, axis=3), axis=1)  # [MR, BN] in LY

    rows = m0 + gl.arange(0, MR, layout=gl.SliceLayout(1, LY))
    cols = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, LY))
    ymask = (rows < M)[:, None] & (cols < N)[None, :]
    y_off = rows[:, None] * N + cols[None, :]
    if HAS_BIAS:
        bias = gl.load(BIAS + cols, mask=cols < N, other=0.0).to(gl.float32)[None, :]
    else:
        bias = 0.0
    finish(y, bias, Y, PART, CNT, y_off, ymask, M, N, pid_k, SPLIT, HAS_BIAS)


def launch(kind: str, grid, args, *, bm: int, bn: int, gpi: int, num_warps: int, num_stages: int, has_bias: bool):
    """paro_gemm.gemm's launch of the kind `gemv_gl` (args: its common argument tuple). stages:
    1 = nothing ahead, 2 = the weights one step ahead, 3 = everything one step ahead, 4+ = also the
    weights stages - 2 steps ahead."""
    if bm not in (1, 2, 4):
        raise ValueError(f"paroquant {kind} takes 1, 2 or 4 rows per program, not bm={bm}")
    if bn % (8 * num_warps):
        raise ValueError(f"paroquant {kind}: BN={bn} must be a multiple of 8 x {num_warps} warps")
    a, s, rs, *rest = args  # the GEMV reads the plane-ordered fp32 activations and their sums only
    paro_gemv_gl[grid](a, rs, *rest, MR=bm, R=bn // (8 * num_warps), GPI=gpi, WARPS=num_warps,
                       PREFETCH=min(2, num_stages - 1), WDEPTH=max(1, num_stages - 2),
                       HAS_BIAS=has_bias, num_warps=num_warps)
    return args[6]
