"""What feeds a rotated linear, as a producer the linear's kernels may fuse into their prologue.

A producer describes the op before the linear (`AddRmsNorm`: residual add + RMSNorm; `SiluMul`:
silu(gate) * up) with its inputs. `ops.produced_forward(prep, producer)` runs the two: where the
platform has a fused producer for the layer's method and the row count is in its band, one kernel
writes the rotated activations the GEMM reads (kernels/triton/paro_producers.py); elsewhere the
producer's `plain()` (the op alone, unfused: reference.py on CPU, one Triton kernel of the same
numerics on NVIDIA) feeds the linear's own forward. The plugin's
graph pass (plugin/producer_pass.py) decides which sites run this way; eager runs stay unfused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radiance.kernels import reference


class _Rows:
    """Rows and dtype of a producer, from the activation tensor it reads (`_input`)."""

    @property
    def rows(self) -> int:
        return int(self._input.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self._input.dtype


@dataclass
class AddRmsNorm(_Rows):
    """vLLM's rms_norm (residual None) or fused_add_rms_norm before the linear."""

    KIND = "norm"
    x: torch.Tensor
    residual: torch.Tensor | None
    weight: torch.Tensor
    eps: float
    residual_out: torch.Tensor | None = None  # set by whichever path ran

    @property
    def _input(self) -> torch.Tensor:
        return self.x

    def plain(self) -> torch.Tensor:
        if self.x.is_cuda:
            from radiance.kernels.triton import paro_producers

            y, self.residual_out = paro_producers.add_norm(self.x, self.residual, self.weight, self.eps)
        else:
            y, self.residual_out = reference.add_rms_norm(self.x, self.residual, self.weight, self.eps)
        return y

    def rotated(self, tables, mode: int, trigger: bool = False):
        from radiance.kernels.triton import paro_producers

        out, self.residual_out = paro_producers.add_norm_rotate(self.x, self.residual, self.weight, self.eps,
                                                                tables, mode, trigger)
        return out


@dataclass
class SiluMul(_Rows):
    """vLLM's SiluAndMul on gu = [gate | up] before the linear (a MLP's down projection)."""

    KIND = "silu_mul"
    gu: torch.Tensor

    @property
    def _input(self) -> torch.Tensor:
        return self.gu

    def plain(self) -> torch.Tensor:
        if self.gu.is_cuda:
            from radiance.kernels.triton import paro_producers

            return paro_producers.silu_mul(self.gu)
        return reference.silu_mul(self.gu)

    def rotated(self, tables, mode: int, trigger: bool = False):
        from radiance.kernels.triton import paro_producers

        return paro_producers.silu_mul_rotate(self.gu, tables, mode, trigger)


Producer = AddRmsNorm | SiluMul


def check_inputs(p: Producer, k: int) -> None:
    """The shapes the linear of K inputs can take from this producer (a bad graph rewrite fails here)."""
    if isinstance(p, AddRmsNorm):
        if p.x.dim() != 2 or p.x.shape[1] != k or p.weight.shape != (k,):
            raise ValueError(f"radiance producer: norm input {list(p.x.shape)} / weight {list(p.weight.shape)} "
                             f"do not feed a linear of K={k}")
    elif p.gu.dim() != 2 or p.gu.shape[1] != 2 * k:
        raise ValueError(f"radiance producer: silu-mul input {list(p.gu.shape)} does not feed a linear of K={k}")
