"""ctypes binding of the kernels' C ABI (device pointers + a stream; no torch C++ headers, so the
start-time build is fast and independent of the torch version) and the torch-level calls.

Imports torch only (never vLLM). `load(path)` once per process; `rotate_quant` / `produce` (its
input from a fused producer) / `gemm` (int4) / `mxfp4_gemm` / `linear` / `produced_linear` (either)
take torch tensors on the GPU and launch on torch's current stream.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from radiance.kernels.hip import DECODE_MAX_ROWS
from radiance.kernels.hip.layout import PreparedParo
from radiance.kernels.hip.mxfp4_layout import PreparedMxfp4
from radiance.kernels.producers import AddRmsNorm, Producer

_P, _I = ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {
    # x, ldx, x_is_bf16, cs, rec, a, asr, M, K, krot, rotations, per_token, stream
    "pq_rotate_quant": [_P, _I, _I, _P, _P, _P, _P, _I, _I, _I, _I, _I, _P],
    # kind, x, ldx, res, ldr, res_out, w, eps, rinv, x_is_bf16, cs, rec, a, asr, M, K, krot, rotations, per_token,
    # stream
    "pq_produce": [_I, _P, _I, _P, _I, _P, _P, ctypes.c_float, _P, _I, _P, _P, _P, _P, _I, _I, _I, _I, _I, _P],
    # a, asr, wq, sz, out, out_is_bf16, partial, M, N, K, pb1, pb2, nsplit, stream
    "pq_int4_fp8_gemm_decode": [_P, _P, _P, _P, _P, _I, _P, _I, _I, _I, _I, _I, _I, _P],
    # a, asr, wq, sz, out, out_is_bf16, M, N, K, pb1, pb2, stream
    "pq_int4_fp8_gemm_prefill": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _P],
    # a, asr, wq, ex, rsc, out, out_is_bf16, partial, M, N, K, pb1, pb2, nsplit, per_block, stream
    "pq_mxfp4_fp8_gemm_decode": [_P, _P, _P, _P, _P, _P, _I, _P, _I, _I, _I, _I, _I, _I, _I, _P],
    # a, asr, wq, ex, rsc, out, out_is_bf16, M, N, K, pb1, pb2, per_block, per_token, stream
    "pq_mxfp4_fp8_gemm_prefill": [_P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _I, _I, _P],
    "pq_wperm": [],
}
MAX_SPLIT = 16


class KernelError(RuntimeError):
    pass


@dataclass
class PqLib:
    path: Path
    dll: ctypes.CDLL
    wperm: bool

    def call(self, name: str, *args) -> None:
        rc = getattr(self.dll, name)(*args)
        if rc != 0:
            raise KernelError(f"{name} failed with code {rc} ({self.path}); -22 = arguments the kernel "
                              "cannot take (K % 128, N % 16, boundaries, M band)")


def load(path: Path | str) -> PqLib:
    """Open a built kernel library and check its ABI."""
    path = Path(path)
    try:
        dll = ctypes.CDLL(str(path))
    except OSError as e:
        raise KernelError(f"cannot load HIP kernel library {path}: {e}; rebuild it (radiance-launch "
                          "builds it at container start)") from e
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(dll, name, None)
        if fn is None:
            raise KernelError(f"{path} lacks {name}: built from other sources; rebuild it")
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return PqLib(path=path, dll=dll, wperm=bool(dll.pq_wperm()))


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


def _check_layout(lib: PqLib, prep: PreparedParo | PreparedMxfp4) -> None:
    if lib.wperm != prep.wperm:
        raise KernelError(f"{lib.path} was built with PQ_WPERM={int(lib.wperm)} but the weights were prepared "
                          f"with wperm={int(prep.wperm)}; set RADIANCE_PQ_WPERM the same for both")


def _rotation_outputs(what: str, x: torch.Tensor, cols: int,
                      prep: PreparedParo | PreparedMxfp4) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the rows a rotation kernel reads (x [M, cols] f16/bf16, unit inner stride) and allocate
    what it writes: a [R, M, K] e4m3 codes, asr [R, M, K/128, 2] {scale, rowsum}."""
    if x.dtype not in (torch.float16, torch.bfloat16) or x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"{what}: x must be a 2-D f16/bf16 tensor with unit inner stride, got "
                         f"{x.dtype} {tuple(x.shape)} strides {x.stride()}")
    if x.shape[1] != cols:
        raise ValueError(f"{what}: x has {x.shape[1]} columns, the layer (K={prep.in_features}) takes {cols}")
    r, m, k = prep.rotations, x.shape[0], prep.in_features
    return (torch.empty(r, m, k, dtype=torch.uint8, device=x.device),
            torch.empty(r, m, k // 128, 2, dtype=torch.float32, device=x.device))


def rotate_quant(lib: PqLib, x: torch.Tensor, prep: PreparedParo | PreparedMxfp4,
                 per_token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] f16/bf16 -> (a [R, M, K] uint8 e4m3 codes, asr [R, M, K/128, 2] f32 {scale, rowsum})."""
    a, asr = _rotation_outputs("rotate_quant", x, prep.in_features, prep)
    m, k, r = x.shape[0], prep.in_features, prep.rotations
    lib.call("pq_rotate_quant", x.data_ptr(), x.stride(0), int(x.dtype == torch.bfloat16), prep.cs.data_ptr(),
             prep.rec.data_ptr(), a.data_ptr(), asr.data_ptr(), m, k, prep.krot, r, int(per_token), _stream(x))
    return a, asr


PRODUCER_KINDS = {"norm": 1, "silu_mul": 2}  # pq_produce's kind (pq_rotate_quant.hip's PQ_SRC_*)
# The norm producer's per-group mode takes each row's RMS inside every (group, rotation) workgroup
# up to this many rows (one launch, G x R reads of a small row); above, pq_produce launches one
# kernel for the rows' RMS first (two launches, as unfused, each row read twice). One row is where
# the NVIDIA producer measured a gain (kernels/triton/paro_producers.FUSED_MAX_M); not measured on gfx1201.
NORM_INLINE_MAX_M = 1


def produce(lib: PqLib, producer: Producer, prep: PreparedParo | PreparedMxfp4,
            per_token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """rotate_quant of the producer's output, computed in the same kernel (kernels/producers.py);
    a norm's residual out lands in producer.residual_out."""
    k = prep.in_features
    norm = isinstance(producer, AddRmsNorm)
    x = producer.x if norm else producer.gu
    a, asr = _rotation_outputs(f"produce ({producer.KIND})", x, k if norm else 2 * k, prep)
    m, r = x.shape[0], prep.rotations
    res = res_out = w = rinv = None
    eps = 0.0
    if norm:
        w, eps, res = producer.weight.contiguous(), float(producer.eps), producer.residual
        if w.dtype != x.dtype or w.shape != (k,) or \
                (res is not None and (res.dtype != x.dtype or res.shape != x.shape or res.stride(1) != 1)):
            raise ValueError(f"produce: norm weight {w.dtype} {tuple(w.shape)} / residual "
                             f"{None if res is None else (res.dtype, tuple(res.shape))} must be {x.dtype}, [{k}] / "
                             f"{tuple(x.shape)} with unit inner stride")
        res_out = torch.empty(m, k, dtype=x.dtype, device=x.device) if res is not None else None
        if not per_token and m > NORM_INLINE_MAX_M:
            rinv = torch.empty(m, dtype=torch.float32, device=x.device)
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    lib.call("pq_produce", PRODUCER_KINDS[producer.KIND], x.data_ptr(), x.stride(0), ptr(res),
             0 if res is None else res.stride(0), ptr(res_out), ptr(w), eps, ptr(rinv), int(x.dtype == torch.bfloat16),
             prep.cs.data_ptr(), prep.rec.data_ptr(), a.data_ptr(), asr.data_ptr(), m, k, prep.krot, r,
             int(per_token), _stream(x))
    if norm:
        producer.residual_out = res_out
    return a, asr


def split_k(m: int, n: int, k: int) -> int:
    """Decode-band split: enough workgroups to fill a 64-CU card, whole groups per slice."""
    blocks = math.ceil(n / 64)
    return max(1, min(k // 128, MAX_SPLIT, math.ceil(256 / blocks)))


def gemm(lib: PqLib, a: torch.Tensor, asr: torch.Tensor, prep: PreparedParo, out_dtype: torch.dtype, *,
         decode: bool, nsplit: int | None = None) -> torch.Tensor:
    """(a, asr) from rotate_quant x the prepared weights -> [M, N] in out_dtype (f16/bf16); `decode`:
    the split-K decode kernel (asr per group), else the prefill one (asr per token)."""
    _check_layout(lib, prep)
    if out_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"gemm: out_dtype must be float16 or bfloat16, got {out_dtype}")
    _, m, k = a.shape
    n = prep.out_features
    out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    bf16 = int(out_dtype == torch.bfloat16)
    common = (a.data_ptr(), asr.data_ptr(), prep.wq.data_ptr(), prep.sz.data_ptr(), out.data_ptr(), bf16)
    if decode:
        nsplit = split_k(m, n, k) if nsplit is None else nsplit
        # torch's allocator, not one inside the launch: safe under graph capture
        partial = torch.empty(nsplit, m, n, dtype=torch.float32, device=a.device) if nsplit > 1 else None
        lib.call("pq_int4_fp8_gemm_decode", *common, partial.data_ptr() if partial is not None else None,
                 m, n, k, prep.pb1, prep.pb2, nsplit, _stream(a))
    else:
        lib.call("pq_int4_fp8_gemm_prefill", *common, m, n, k, prep.pb1, prep.pb2, _stream(a))
    return out


def mxfp4_gemm(lib: PqLib, a: torch.Tensor, asr: torch.Tensor, prep: PreparedMxfp4, out_dtype: torch.dtype, *,
               decode: bool, nsplit: int | None = None, per_token: bool = False) -> torch.Tensor:
    """(a, asr) from rotate_quant x the prepared MXFP4 weights -> [M, N] in out_dtype (f16/bf16).
    per_token: asr came from rotate_quant(per_token=True); the prefill band then scales once per row."""
    _check_layout(lib, prep)
    if out_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"mxfp4_gemm: out_dtype must be float16 or bfloat16, got {out_dtype}")
    r, m, k = a.shape
    if (r, k) != (prep.rotations, prep.in_features) or tuple(asr.shape) != (r, m, k // 128, 2):
        raise ValueError(f"mxfp4_gemm: activations {list(a.shape)} / scales {list(asr.shape)} do not match the "
                         f"layer's [{prep.rotations}, M, {prep.in_features}] (rotations, rows, K)")
    n = prep.out_features
    out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    common = (a.data_ptr(), asr.data_ptr(), prep.wq.data_ptr(), prep.ex.data_ptr(), prep.rsc.data_ptr(),
              out.data_ptr(), int(out_dtype == torch.bfloat16))
    if decode:
        if m > DECODE_MAX_ROWS:
            raise ValueError(f"mxfp4_gemm: the decode kernel takes M <= {DECODE_MAX_ROWS}, got M={m}; "
                             f"keep RADIANCE_PQ_DECODE_MAX_M <= {DECODE_MAX_ROWS}")
        nsplit = split_k(m, n, k) if nsplit is None else nsplit
        # torch's allocator, not one inside the launch: safe under graph capture
        partial = torch.empty(nsplit, m, n, dtype=torch.float32, device=a.device) if nsplit > 1 else None
        lib.call("pq_mxfp4_fp8_gemm_decode", *common, partial.data_ptr() if partial is not None else None,
                 m, n, k, prep.pb1, prep.pb2, nsplit, int(prep.per_block), _stream(a))
    else:
        lib.call("pq_mxfp4_fp8_gemm_prefill", *common, m, n, k, prep.pb1, prep.pb2, int(prep.per_block),
                 int(per_token), _stream(a))
    return out


def _gemm_of(lib: PqLib, a: torch.Tensor, asr: torch.Tensor, prep: PreparedParo | PreparedMxfp4,
             dtype: torch.dtype, decode: bool, bias: torch.Tensor | None) -> torch.Tensor:
    if isinstance(prep, PreparedMxfp4):
        y = mxfp4_gemm(lib, a, asr, prep, dtype, decode=decode, per_token=not decode)
    else:
        y = gemm(lib, a, asr, prep, dtype, decode=decode)
    return y if bias is None else y + bias


def linear(lib: PqLib, x: torch.Tensor, prep: PreparedParo | PreparedMxfp4,
           bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x W^T (+ bias) for x [..., K], int4 or MXFP4 weights: per-group activation scales in the
    decode band (M <= prep.decode_rows, the layer's plan: split-K GEMM), per-token above it (prefill GEMM)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    decode = x2.shape[0] <= prep.decode_rows
    a, asr = rotate_quant(lib, x2, prep, per_token=not decode)
    return _gemm_of(lib, a, asr, prep, x.dtype, decode, bias).reshape(*lead, prep.out_features)


def produced_linear(lib: PqLib, producer: Producer, prep: PreparedParo | PreparedMxfp4,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """`linear` of the producer's output [M, K], the producer fused into the rotation (every M: the
    per-group and the per-token modes both take it)."""
    decode = producer.rows <= prep.decode_rows
    a, asr = produce(lib, producer, prep, per_token=not decode)
    return _gemm_of(lib, a, asr, prep, producer.dtype, decode, bias)
