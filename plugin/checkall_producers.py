"""CHECKALL for the fused producers: in an eager run with RADIANCE_PQ_CHECKALL and the producer
knobs set, each gated linear fed straight by an RMSNorm (RADIANCE_PQ_ROT_STREAM) or a SiluAndMul
(RADIANCE_PQ_ROT_STREAM2) also runs the fused path on the same inputs and logs it against the
unfused path that served the call:

    CHECKALL <layer> <method> N=.. K=.. M=.. producer=<norm|silu_mul> fused_rel=<|y_f - y| / |y|> residual=<exact|rel|none>

Why eager: the producers replace (norm, linear) pairs in compiled graphs only (plugin/producer_pass.py),
and CHECKALL needs eager. So an eval run keeps serving the unfused ops -- the reference -- and this
puts the fused kernels beside them on the model's real activations: vLLM's RMSNorm and SiluAndMul
record what they were called with (a clone: vLLM's fused_add_rms_norm overwrites its inputs) under
their output, and a linear whose input is such an output finds it there.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import torch

from radiance.kernels import ops
from radiance.kernels.producers import AddRmsNorm, SiluMul

log = logging.getLogger("radiance.plugin.checkall")
KEEP = 8  # recorded calls kept (a linear consumes its producer's output right after it)
# the output's (address, size, width) -> (output, producer on cloned inputs, residual out); the output is
# held, so its address is not reused meanwhile (the linear gets it reshaped: a new tensor, same data)
_SEEN: OrderedDict[tuple, tuple] = OrderedDict()


def _remember(out: torch.Tensor, producer, residual_out: torch.Tensor | None) -> None:
    _SEEN[(out.data_ptr(), out.numel(), out.shape[-1])] = (out, producer, residual_out)
    while len(_SEEN) > KEEP:
        _SEEN.popitem(last=False)


_SAVED: dict = {}  # class -> its own forward while wrapped (None: inherited)


def install(norms: bool, acts: bool) -> None:
    """Wrap vLLM's RMSNorm (norms) and SiluAndMul (acts) forwards (once per process) so they record
    their calls: the producers the layers' KernelConfig asks for."""
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm

    before = len(_SAVED)
    if norms and RMSNorm not in _SAVED:
        _SAVED[RMSNorm] = RMSNorm.__dict__.get("forward")
        norm_forward = RMSNorm.forward

        def rms_norm(self, x, residual=None, *args, **kwargs):
            p = AddRmsNorm(x.clone(), None if residual is None else residual.clone(), self.weight.data,
                           self.variance_epsilon)
            out = norm_forward(self, x, residual, *args, **kwargs)
            y, ro = (out, None) if residual is None else out
            _remember(y, p, ro)
            return out

        RMSNorm.forward = rms_norm
    if acts and SiluAndMul not in _SAVED:
        _SAVED[SiluAndMul] = SiluAndMul.__dict__.get("forward")
        act_forward = SiluAndMul.forward

        def silu_and_mul(self, x, *args, **kwargs):
            out = act_forward(self, x, *args, **kwargs)
            _remember(out, SiluMul(x.clone()), None)
            return out

        SiluAndMul.forward = silu_and_mul
    if len(_SAVED) > before:
        log.info("CHECKALL: the gated linears fed by %s also run the fused producers, against the unfused path",
                 " and ".join(w for w, on in (("RMSNorm", norms), ("SiluAndMul", acts)) if on))


def uninstall() -> None:
    """The classes' own forwards back, nothing recorded (tests)."""
    for cls, forward in _SAVED.items():
        if forward is None:
            del cls.forward  # it was inherited
        else:
            cls.forward = forward
    _SAVED.clear()
    _SEEN.clear()


def check(layer, head: str, x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, max_m: int) -> None:
    """When x is a recorded producer's output: the fused path on its inputs against y (first max_m rows)."""
    seen = _SEEN.pop((x.data_ptr(), x.numel(), x.shape[-1]), None)
    if seen is None:
        return
    _, p, residual_out = seen
    prep = layer._radiance_prep
    if not ops.can_produce(prep)[0] or layer._radiance_gather:
        return  # what the graph pass would leave unfused too
    if isinstance(p, AddRmsNorm):
        p = AddRmsNorm(p.x[:max_m], None if p.residual is None else p.residual[:max_m], p.weight, p.eps)
    else:
        p = SiluMul(p.gu[:max_m])
    got = ops.produced_forward(prep, p, bias)
    want = y[:max_m]
    res = "none"
    if residual_out is not None:
        ro, want_ro = p.residual_out, residual_out[:max_m]
        res = "exact" if torch.equal(ro, want_ro) else f"{_rel(ro, want_ro):.3e}"
    log.info("%s producer=%s fused_rel=%.3e residual=%s", head, p.KIND, _rel(got, want), res)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.float()
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))
