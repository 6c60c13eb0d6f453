"""ParoQuant activation prologue: channel scale + krot Givens layers per 128-group, then the
activation format the GEMM reads, for P differently rotated copies in one launch.

One program per (128-group, row block, partition). A Givens layer's 64 pairs partition the group,
so a layer is one gather: x' = c*x + s*x[partner] with s signed per position (+sin at the pair's
i, -sin at its j); `RotTables` holds partner/cos/ssin per (partition, layer, channel), built once.

Output modes (OUT_MODE):
- 0 ROT32: the rotated activations in fp32, RS = their group sums (the numerics gate against
           reference.rotate; the gemv GEMM's input).
- 1 F16G:  fp16 codes scaled per (row, group) by a power of two so the group amax lands in
           [2^14, 2^15): exact scaling, no overflow whatever the activation range, no subnormals.
           S = that power of two, RS = S * (sum of the fp16 codes) -- the GEMM's W4A16 input.
- 2 I8G:   int8 per (row, group), S = amax/127, q = clamp(rne(x / S), +-127), RS = S * (integer
           sum of q, exact in fp32) -- reference.quant_int8_group's numerics; the GEMM's W4A8 input.
           In both, RS is the zero-point term's activation factor, formed here once per (row, group)
           instead of once per GEMM program.
- 3 PLAIN: the rotated activations cast to fp16 with no scale (dequant-to-scratch + cuBLAS path).
- 4 ROT32P: ROT32 in the gemv's plane order: within each group, plane j (= the j-th nibble of the
           gemv's weight words) holds its 16 activations contiguously, pre-multiplied by the power
           of two 16^-(j % 4) the nibble's bit position carries (exact), so the gemv loads each
           plane as one vector and multiplies by nothing. RS = the unscaled group sums.
- 6 F16GF: F16G in the fragment order of paro_mma_gluon: channel 16q + 4i + p1 + 2e + 64p0 of a
           group at position 32q + 8i + 4p1 + 2p0 + e, so each MMA lane's 32 activations are
           contiguous (the kernel's docstring says why).
- 7 PLAINW: PLAIN in the k order of paro_wgmma (fp16 wgmma with the weights dequantized into its
           register A operand): channel 64h + t of a group (h the nibble, t the byte) at position
           32(t // 16) + 16(t % 2) + 8h + 2((t // 4) % 4) + (t % 4) // 2, so that lane q's four weight
           words q, q + 4, q + 8, q + 12 give its fragment registers with one shift and one LOP3 each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from radiance.kernels import gpu, registry
from radiance.kernels.linear import NO_COLUMN, Rotation, check_copies

GROUP = 128
ROT32, F16G, I8G, PLAIN, ROT32P, F16GF, PLAINW = 0, 1, 2, 3, 4, 6, 7
DENSE_MIN_M = 512  # bf16 rows from which the tensor-core path wins on every shape swept on the H200
HILO = 5  # internal: a group matrix as bf16 high and low parts (rotate's dense path)


@dataclass
class RotTables:
    """Per-partition rotation tables (device tensors), built once from checkpoint tensors."""

    partner: torch.Tensor  # [P, krot, K] int32, partner channel within the 128-group
    cos: torch.Tensor  # [P, krot, K] fp32
    ssin: torch.Tensor  # [P, krot, K] fp32, +sin at a pair's first channel, -sin at its second
    cs: torch.Tensor  # [P, K] fp32 channel scales (pre-inverted: multiply)

    @property
    def parts(self) -> int:
        return int(self.partner.shape[0])

    @property
    def krot(self) -> int:
        return int(self.partner.shape[1])

    @property
    def k(self) -> int:
        return int(self.partner.shape[2])


@dataclass(kw_only=True)
class RotatedLayer:
    """What every NVIDIA rotated GEMM's layer holds besides its weights (paro_ops.ParoLayer,
    mxfp4_ops.Mxfp4Layer): the prologue's tables, the column select, the shape, the card, the plan."""

    tables: RotTables
    bounds: tuple[int, int]  # first column of rotated copy 1 and 2 (linear.kernel_bounds)
    n: int
    k: int
    cap: tuple[int, int]
    sms: int
    decode_max_m: int
    kernels: registry.Plan  # rows -> kernel (the method's registry), chosen at prepare
    bias: torch.Tensor | None = None
    tiles: dict = field(default_factory=dict)

    @property
    def parts(self) -> int:
        return self.tables.parts

    def straddles(self, bn: int) -> bool:
        """Whether column blocks of bn would straddle a rotation boundary (a tile must not)."""
        return any(b < NO_COLUMN and b % bn for b in self.bounds)

    def check_partitions(self, what: str, a: torch.Tensor) -> None:
        check_copies(what, self.parts, self.k, a)


def build_tables(rotations: list[Rotation], device=None) -> RotTables:
    """The distinct rotations (kernels/linear.py: pairs [krot, K] i16, theta [krot, K/2] f16,
    channel_scales [1, K]). Rotations with fewer layers are padded with identity layers
    (partner = self, c = 1, s = 0)."""
    krot = max(int(r.pairs.shape[0]) for r in rotations)
    k = int(rotations[0].pairs.shape[1])
    parts = len(rotations)
    partner = torch.arange(GROUP, dtype=torch.int32).repeat(k // GROUP).repeat(parts, krot, 1)
    cos = torch.ones(parts, krot, k, dtype=torch.float32)
    ssin = torch.zeros(parts, krot, k, dtype=torch.float32)
    cs = torch.empty(parts, k, dtype=torch.float32)
    for p, rot in enumerate(rotations):
        pairs, theta, chs = rot.pairs, rot.theta, rot.channel_scales
        if int(pairs.shape[1]) != k:
            raise ValueError(f"partition {p}: K={int(pairs.shape[1])} differs from partition 0's K={k}")
        r = int(pairs.shape[0])
        local = pairs.to(torch.int64).cpu().view(r, k // GROUP, GROUP)
        base = (torch.arange(k // GROUP) * GROUP).view(1, -1, 1)
        gi = (local[:, :, 0::2] + base).reshape(r, k // 2)
        gj = (local[:, :, 1::2] + base).reshape(r, k // 2)
        th = theta.cpu().to(torch.float32)
        c, s = torch.cos(th), torch.sin(th)  # what reference.rotation_plan computes
        for layer in range(r):
            i, j = gi[layer], gj[layer]
            partner[p, layer, i] = (j % GROUP).to(torch.int32)
            partner[p, layer, j] = (i % GROUP).to(torch.int32)
            cos[p, layer, i] = c[layer]
            cos[p, layer, j] = c[layer]
            ssin[p, layer, i] = s[layer]
            ssin[p, layer, j] = -s[layer]
        cs[p] = chs.reshape(-1).cpu().to(torch.float32)
    dev = device if device is not None else rotations[0].pairs.device
    return RotTables(partner.to(dev).contiguous(), cos.to(dev).contiguous(),
                     ssin.to(dev).contiguous(), cs.to(dev).contiguous())


@triton.jit
def store_group(x, A, S, RS, rows, cols, rmask, g, p, M, K, G, BM: tl.constexpr, OUT_MODE: tl.constexpr):
    # the rotated group x [BM, 128] (fp32) in the format OUT_MODE names (module docstring)
    if OUT_MODE == 6:  # F16GF: the fragment order (module docstring)
        r = cols % 64
        kk = g * 128 + 32 * (r // 16) + 8 * ((r % 16) // 4) + 4 * (r % 2) + 2 * (cols // 64) + (r % 4) // 2
    elif OUT_MODE == 7:  # PLAINW: paro_wgmma's k order (module docstring)
        t = cols % 64
        kk = g * 128 + 32 * (t // 16) + 16 * (t % 2) + 8 * (cols // 64) + 2 * ((t // 4) % 4) + (t % 4) // 2
    else:
        kk = g * 128 + cols
    out = A + p * M * K + rows[:, None] * K + kk[None, :]
    if OUT_MODE == 5:  # HILO: x = hi + lo to 16 significant bits, lo stored P*M*K further on
        hi = x.to(tl.bfloat16)
        tl.store(out, hi, mask=rmask[:, None])
        tl.store(out + K * M * tl.num_programs(2), (x - hi.to(tl.float32)).to(tl.bfloat16), mask=rmask[:, None])
    elif OUT_MODE == 0 or OUT_MODE == 4:
        if OUT_MODE == 0:
            tl.store(out, x, mask=rmask[:, None])
        else:
            # channel c = h*64 + 4t + i is nibble j = 2i + h of gemv word t (paro_gemm's layout)
            j = 2 * (cols % 4) + cols // 64
            dest = A + p * M * K + rows[:, None] * K + g * 128 + (j * 16 + (cols % 64) // 4)[None, :]
            scale = ((127 - 4 * (j % 4)) << 23).to(tl.float32, bitcast=True)  # 16^-(j % 4), built exactly
            tl.store(dest, x * scale[None, :], mask=rmask[:, None])
        tl.store(RS + p * M * G + rows * G + g, tl.sum(x, axis=1), mask=rmask)  # unscaled group sums
    elif OUT_MODE == 3 or OUT_MODE == 7:
        tl.store(out, x.to(tl.float16), mask=rmask[:, None])
    else:
        amax = tl.max(tl.abs(x), axis=1)
        if OUT_MODE == 1 or OUT_MODE == 6:
            # power of two 2^(e-14) with e = amax's exponent field, floored at the smallest normal
            e = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
            se = tl.maximum(e - 14, 1)
            scale = (se << 23).to(tl.float32, bitcast=True)
            inv = ((254 - se) << 23).to(tl.float32, bitcast=True)
            q = (x * inv[:, None]).to(tl.float16)
            rs = tl.sum(q.to(tl.float32), axis=1)
        else:
            scale = amax / 127.0
            safe = tl.where(scale > 0, scale, 1.0)
            v = tl.math.div_rn(x, tl.broadcast_to(safe[:, None], (BM, 128)))
            v = (v + 12582912.0) - 12582912.0
            v = tl.minimum(tl.maximum(v, -127.0), 127.0)
            q = v.to(tl.int8)
            rs = tl.sum(v, axis=1)  # integer valued, |rs| <= 127*128: exact in fp32
        tl.store(out, q, mask=rmask[:, None])
        sg = p * M * G + rows * G + g
        tl.store(S + sg, scale, mask=rmask)
        tl.store(RS + sg, scale * rs, mask=rmask)


@triton.jit
def _group_program(M, BM: tl.constexpr):
    # grid (group, row block, partition) -> this program's group, partition, rows, columns, row mask
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    return tl.program_id(0), tl.program_id(2), rows, tl.arange(0, 128), rows < M


@triton.jit
def _rotate_kernel(X, PARTNER, COS, SSIN, CS, A, S, RS,
                   M, K, G, stride_xm,
                   KROT: tl.constexpr, BM: tl.constexpr, OUT_MODE: tl.constexpr, IDENT: tl.constexpr,
                   TRIGGER: tl.constexpr = False):
    # IDENT: rows of the 128x128 identity instead of X -- the rotation applied to it is the group's
    # whole rotation as a matrix (group_matrices)
    if TRIGGER:  # the GEMM launched after it (programmatic dependent launch, sm_90) may start now
        tl.extra.cuda.gdc_launch_dependents()
    g, p, rows, cols, rmask = _group_program(M, BM)
    kk = g * 128 + cols
    if IDENT:
        x = tl.where(rows[:, None] == cols[None, :], 1.0, 0.0)
    else:
        x = tl.load(X + rows[:, None] * stride_xm + kk[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    x = givens(x, PARTNER, COS, SSIN, CS, p, K, kk, KROT, BM)
    store_group(x, A, S, RS, rows, cols, rmask, g, p, M, K, G, BM, OUT_MODE)


@triton.jit
def givens(x, PARTNER, COS, SSIN, CS, p, K, kk, KROT: tl.constexpr, BM: tl.constexpr):
    # the group x [BM, 128] (fp32, channels kk) times copy p's channel scales, then its KROT layers
    x = x * tl.load(CS + p * K + kk)[None, :]
    for layer in tl.static_range(KROT):
        tab = (p * KROT + layer) * K + kk
        idx = tl.load(PARTNER + tab)
        c = tl.load(COS + tab)
        s = tl.load(SSIN + tab)
        xp = tl.gather(x, tl.broadcast_to(idx[None, :], (BM, 128)), axis=1)
        x = x * c[None, :] + xp * s[None, :]
    return x


@triton.jit
def _rotate_dense_kernel(X, T, A, S, RS, M, K, G, stride_xm, BM: tl.constexpr, OUT_MODE: tl.constexpr):
    # many bf16 rows: the group's whole rotation (channel scale + krot Givens layers) as one 128x128
    # matrix T_g = T_hi + T_lo applied on the tensor cores. x is exact in bf16 and the two bf16
    # parts hold T_g to 16 significant bits, so two bf16 dots with fp32 accumulation give the
    # rotation to ~1e-5 -- the krot gathers across lanes become 2 MMAs per group.
    g, p, rows, cols, rmask = _group_program(M, BM)
    x = tl.load(X + rows[:, None] * stride_xm + g * 128 + cols[None, :], mask=rmask[:, None], other=0.0)
    t = T + p * 128 * K + cols[:, None] * K + g * 128 + cols[None, :]  # [r, c] = T_g
    acc = tl.dot(x, tl.load(t))
    acc = tl.dot(x, tl.load(t + tl.num_programs(2) * 128 * K), acc)
    store_group(acc, A, S, RS, rows, cols, rmask, g, p, M, K, G, BM, OUT_MODE)


_OUT_DTYPE = {ROT32: torch.float32, F16G: torch.float16, I8G: torch.int8, PLAIN: torch.float16, ROT32P: torch.float32,
              F16GF: torch.float16, PLAINW: torch.float16}


def prologue_tile(m: int) -> tuple[int, int]:
    """(rows per program, warps). Measured on the H200 (bench/probes/sweep_prologue.py): small programs
    win -- a group's gathers stay within fewer warps and more programs are in flight (M = 2048: 8
    rows on one warp beat 16 rows on four by ~20 %; M = 16: 4 rows on four warps won)."""
    if m > 16:
        return 8, 1
    bm = min(4, triton.next_power_of_2(max(m, 1)))
    return bm, 4 if bm == 4 else 2


def dense_tile(mode: int, cap: tuple[int, int]) -> tuple[int, int]:
    """(rows per program, warps) of the tensor-core prologue. sm_90: the H200 sweep
    (bench/probes/sweep_prologue.py). Below, mma.sync keeps both operands in registers and
    those tiles spill 32-312 bytes per thread on sm_86 (kernels/tests/test_offline_compile.py); 64
    rows on 8 warps is the largest that does not, under Triton 3.6 and 3.9 (offline, unmeasured)."""
    if cap >= (9, 0):
        return (128, 8) if mode == I8G else (64, 4)
    return 64, 8


def group_matrices(tables: RotTables, device, mode: int = HILO) -> torch.Tensor:
    """Each group's whole rotation as a 128x128 matrix (row r = the rotated unit vector e_r), by
    the gather kernel run on the identity: HILO -> bf16 [2 (high, low), P, 128, K], whose sum
    holds T to 16 significant bits; ROT32 -> fp32 [1, P, 128, K]."""
    parts, k = tables.parts, tables.k
    g = k // GROUP
    t = torch.empty(2 if mode == HILO else 1, parts, GROUP, k, device=device,
                    dtype=torch.bfloat16 if mode == HILO else torch.float32)
    rs = torch.empty(parts, GROUP, g, dtype=torch.float32, device=device)  # ROT32's group sums, unused
    ibm, iwarps = prologue_tile(GROUP)
    _rotate_kernel[(g, GROUP // ibm, parts)](t, tables.partner, tables.cos, tables.ssin, tables.cs, t, rs, rs,
                                             GROUP, k, g, 0, KROT=tables.krot, BM=ibm, OUT_MODE=mode,
                                             IDENT=True, num_warps=iwarps)
    return t


def rotate(x: torch.Tensor, tables: RotTables, mode: int,
           out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
           bm: int | None = None, warps: int | None = None, dense: bool | None = None, trigger: bool = False):
    """x [M, K] (bf16/fp16/fp32) -> (A [P, M, K], S [P, M, G] fp32, RS [P, M, G] fp32).
    S is None in ROT32(P) and PLAIN(W) modes, RS in PLAIN(W). bm / warps override the rows per
    program and warps (tile sweeps); dense forces (or refuses) the tensor-core path that
    bf16 activations of M >= DENSE_MIN_M rows take on sm_80+."""
    if x.dim() != 2 or x.shape[1] != tables.k:
        raise ValueError(f"paroquant prologue: x must be [M, {tables.k}], got {list(x.shape)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    m, k = x.shape
    g = k // GROUP
    parts = tables.parts
    a, s, rs = out or outputs(m, tables, mode, x.device)
    if dense is None:
        dense = m >= DENSE_MIN_M and x.dtype == torch.bfloat16 and (gpu.capability(x.device) or (0, 0)) >= (8, 0)
    if dense:  # T [2 (hi, lo), P, 128, K]: row r of T_g is the rotated e_r; then two dots per group
        if x.dtype != torch.bfloat16:
            raise ValueError(f"paroquant prologue: the tensor-core path takes bf16 activations, got {x.dtype}")
        t = group_matrices(tables, x.device)
        dbm, dwarps = dense_tile(mode, gpu.capability(x.device) or (9, 0))
        bm, warps = bm or dbm, warps or dwarps
        _rotate_dense_kernel[(g, triton.cdiv(m, bm), parts)](x, t, a, s, rs, m, k, g, x.stride(0), BM=bm,
                                                             OUT_MODE=mode, num_warps=warps)
    else:
        tbm, twarps = prologue_tile(m)
        bm, warps = bm or tbm, warps or twarps
        _rotate_kernel[(g, triton.cdiv(m, bm), parts)](x, tables.partner, tables.cos, tables.ssin, tables.cs, a,
                                                       s, rs, m, k, g, x.stride(0), KROT=tables.krot, BM=bm,
                                                       OUT_MODE=mode, IDENT=False, TRIGGER=trigger, num_warps=warps)
    return returned(mode, a, s, rs)


def outputs(m: int, tables: RotTables, mode: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Empty (A [P, M, K] in mode's dtype, S, RS [P, M, G] fp32) for M rows."""
    parts, k = tables.parts, tables.k
    return (torch.empty(parts, m, k, dtype=_OUT_DTYPE[mode], device=device),
            torch.empty(parts, m, k // GROUP, dtype=torch.float32, device=device),
            torch.empty(parts, m, k // GROUP, dtype=torch.float32, device=device))


def returned(mode: int, a: torch.Tensor, s: torch.Tensor, rs: torch.Tensor):
    """(A, S, RS) with the outputs `mode` does not write as None: what the GEMMs take."""
    if mode in (PLAIN, PLAINW):
        return a, None, None
    if mode in (ROT32, ROT32P):
        return a, None, rs
    return a, s, rs
