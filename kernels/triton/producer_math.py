"""The producers' arithmetic, shared by every kernel that computes a norm or silu-mul in place of
the op before a linear (paro_producers, pq2_quant): vLLM's numerics, as reference.add_rms_norm /
reference.silu_mul write them down."""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def normed(z, r, w, out_dtype):
    # vLLM's norm from the fp32 sum z and its rsqrt r: rounded to the weight's dtype, times the
    # weight, rounded to the activations' (reference.add_rms_norm); fp32 out
    return ((z * r).to(w.dtype).to(tl.float32) * w.to(tl.float32)).to(out_dtype).to(tl.float32)


@triton.jit
def silu_mul(gate, up, dtype, INTERPRET: tl.constexpr):
    # torch's silu: IEEE division by 1 + expf(-x) (libdevice's expf, not the ex2 approximation; the
    # CPU interpreter has no libdevice), rounded to dtype, then the product rounded; fp32 out
    e = tl.exp(-gate) if INTERPRET else libdevice.exp(-gate)
    act = tl.math.div_rn(gate, 1.0 + e).to(dtype).to(tl.float32)
    return (act * up).to(dtype).to(tl.float32)


@triton.jit
def row_rinv(X, R, row, stride_xm, stride_rm, K, eps, HAS_RES: tl.constexpr, CHUNK: tl.constexpr):
    # 1 / rms of one row of x (+ residual): the fp32 sum of squares, chunk by chunk
    ss = tl.zeros([CHUNK], dtype=tl.float32)
    for c0 in range(0, K, CHUNK):
        c = c0 + tl.arange(0, CHUNK)
        z = tl.load(X + row * stride_xm + c, mask=c < K, other=0.0).to(tl.float32)
        if HAS_RES:
            z += tl.load(R + row * stride_rm + c, mask=c < K, other=0.0).to(tl.float32)
        ss += z * z
    return tl.math.rsqrt(tl.sum(ss, axis=0) / K + eps)
