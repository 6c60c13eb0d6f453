"""The HIP kernels as torch custom ops (`torch.ops.radiance_hip.*`), for the vLLM plugin to call.

Ops take plain tensors and ints (the `PreparedParo` / `PreparedMxfp4` fields) so dynamo and CUDA
graphs see one opaque call each; the library is loaded once per process, on first use, from the
directory the layers were prepared with (`use_kernel_dir`: RADIANCE_KERNEL_DIR, which the launcher
sets, resolved at load) or as `set_library` gives it. Imports torch only, never vLLM.
"""

from __future__ import annotations

from pathlib import Path

import torch

from radiance.kernels.build import HIP_LIBRARY
from radiance.kernels.hip import DECODE_MAX_ROWS
from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip.layout import PreparedParo
from radiance.kernels.hip.mxfp4_layout import PreparedMxfp4

_LIB: pqlib.PqLib | None = None
_DIR: str | None = None  # where the library is loaded from on first use (use_kernel_dir)


def set_library(path: Path | str) -> pqlib.PqLib:
    global _LIB
    _LIB = pqlib.load(path)
    return _LIB


def use_kernel_dir(kernel_dir: str | None) -> None:
    """Where library() loads the library from on first use (a layer's KernelConfig.kernel_dir, at prepare)."""
    global _DIR
    if kernel_dir:
        _DIR = kernel_dir


def library() -> pqlib.PqLib:
    """The loaded library; on first use, the one in the kernel directory the layers were prepared
    with (RADIANCE_KERNEL_DIR, set by radiance-launch)."""
    if _LIB is None:
        if not _DIR:
            raise pqlib.KernelError("no HIP kernel library loaded: call radiance.kernels.hip.ops.set_library(path) "
                                    "or start under radiance-launch, which sets RADIANCE_KERNEL_DIR")
        return set_library(Path(_DIR) / HIP_LIBRARY)
    return _LIB


def _prep(wq, sz, cs, rec, krot: int, k: int, n: int, pb1: int, pb2: int, wperm: bool,
          decode_rows: int) -> PreparedParo:
    return PreparedParo(wq=wq, sz=sz, cs=cs, rec=rec, krot=krot, in_features=k, out_features=n,
                        pb1=pb1, pb2=pb2, wperm=wperm, decode_rows=decode_rows)


def op_args(prep: PreparedParo) -> tuple:
    """The positional arguments after the activation for the ops below."""
    return (prep.wq, prep.sz, prep.cs, prep.rec, prep.krot, prep.out_features, prep.pb1, prep.pb2, prep.wperm,
            prep.decode_rows)


@torch.library.custom_op("radiance_hip::paroquant_linear", mutates_args=())
def paroquant_linear(x: torch.Tensor, wq: torch.Tensor, sz: torch.Tensor, cs: torch.Tensor, rec: torch.Tensor,
                     krot: int, n: int, pb1: int, pb2: int, wperm: bool, decode_rows: int) -> torch.Tensor:
    prep = _prep(wq, sz, cs, rec, krot, x.shape[-1], n, pb1, pb2, wperm, decode_rows)
    return pqlib.linear(library(), x, prep)


@paroquant_linear.register_fake
def _(x, wq, sz, cs, rec, krot, n, pb1, pb2, wperm, decode_rows):
    return x.new_empty(*x.shape[:-1], n)


@torch.library.custom_op("radiance_hip::pq_rotate_quant", mutates_args=())
def pq_rotate_quant(x: torch.Tensor, cs: torch.Tensor, rec: torch.Tensor, krot: int,
                    per_token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    k = x.shape[-1]
    prep = PreparedParo(wq=cs, sz=cs, cs=cs, rec=rec, krot=krot, in_features=k, out_features=0,
                        pb1=0, pb2=0, wperm=True)
    return pqlib.rotate_quant(library(), x, prep, per_token)


@pq_rotate_quant.register_fake
def _(x, cs, rec, krot, per_token):
    r, (m, k) = cs.shape[0], x.shape
    return (x.new_empty(r, m, k, dtype=torch.uint8), x.new_empty(r, m, k // 128, 2, dtype=torch.float32))


@torch.library.custom_op("radiance_hip::pq_int4_fp8_gemm", mutates_args=())
def pq_int4_fp8_gemm(a: torch.Tensor, asr: torch.Tensor, wq: torch.Tensor, sz: torch.Tensor, n: int, pb1: int,
                     pb2: int, wperm: bool, out_dtype: torch.dtype, decode: bool) -> torch.Tensor:
    prep = PreparedParo(wq=wq, sz=sz, cs=asr, rec=asr, krot=0, in_features=a.shape[-1], out_features=n,
                        pb1=pb1, pb2=pb2, wperm=wperm)
    return pqlib.gemm(library(), a, asr, prep, out_dtype, decode=decode)


@pq_int4_fp8_gemm.register_fake
def _(a, asr, wq, sz, n, pb1, pb2, wperm, out_dtype, decode):
    return a.new_empty(a.shape[1], n, dtype=out_dtype)


# ----------------------------------------------------------------------------- paroquant_mxfp4
def _mxfp4_prep(wq, ex, rsc, cs, rec, krot: int, k: int, n: int, pb1: int, pb2: int, wperm: bool,
                per_block: bool, decode_rows: int = DECODE_MAX_ROWS) -> PreparedMxfp4:
    return PreparedMxfp4(wq=wq, ex=ex, rsc=rsc, cs=cs, rec=rec, krot=krot, in_features=k, out_features=n,
                         pb1=pb1, pb2=pb2, wperm=wperm, per_block=per_block, decode_rows=decode_rows)


def mxfp4_op_args(prep: PreparedMxfp4) -> tuple:
    """The positional arguments after the activation for paroquant_mxfp4_linear."""
    return (prep.wq, prep.ex, prep.rsc, prep.cs, prep.rec, prep.krot, prep.out_features, prep.pb1, prep.pb2,
            prep.wperm, prep.per_block, prep.decode_rows)


@torch.library.custom_op("radiance_hip::paroquant_mxfp4_linear", mutates_args=())
def paroquant_mxfp4_linear(x: torch.Tensor, wq: torch.Tensor, ex: torch.Tensor, rsc: torch.Tensor, cs: torch.Tensor,
                           rec: torch.Tensor, krot: int, n: int, pb1: int, pb2: int, wperm: bool,
                           per_block: bool, decode_rows: int) -> torch.Tensor:
    prep = _mxfp4_prep(wq, ex, rsc, cs, rec, krot, x.shape[-1], n, pb1, pb2, wperm, per_block, decode_rows)
    return pqlib.linear(library(), x, prep)


@paroquant_mxfp4_linear.register_fake
def _(x, wq, ex, rsc, cs, rec, krot, n, pb1, pb2, wperm, per_block, decode_rows):
    return x.new_empty(*x.shape[:-1], n)


@torch.library.custom_op("radiance_hip::pq_mxfp4_fp8_gemm", mutates_args=())
def pq_mxfp4_fp8_gemm(a: torch.Tensor, asr: torch.Tensor, wq: torch.Tensor, ex: torch.Tensor, rsc: torch.Tensor,
                      n: int, pb1: int, pb2: int, wperm: bool, per_block: bool, out_dtype: torch.dtype, decode: bool,
                      per_token: bool) -> torch.Tensor:
    # the rotation tensors are not read by the GEMM: asr stands in for them
    prep = _mxfp4_prep(wq, ex, rsc, asr.new_empty(a.shape[0], 0), asr, 0, a.shape[-1], n, pb1, pb2, wperm, per_block)
    return pqlib.mxfp4_gemm(library(), a, asr, prep, out_dtype, decode=decode, per_token=per_token)


@pq_mxfp4_fp8_gemm.register_fake
def _(a, asr, wq, ex, rsc, n, pb1, pb2, wperm, per_block, out_dtype, decode, per_token):
    return a.new_empty(a.shape[1], n, dtype=out_dtype)
