"""The graph pass that fuses each rotated linear's producer into its prologue (RADIANCE_PQ_ROT_STREAM /
_ROT_STREAM2): in the post-grad graph vLLM compiles, a `radiance_linear` whose input is

- vLLM's `rms_norm` / `fused_add_rms_norm` IR op (RADIANCE_PQ_ROT_STREAM), or
- SiluAndMul's decomposition (RADIANCE_PQ_ROT_STREAM2; matched against the same function traced
  by this torch, so the match follows whatever the decomposition is)

with no other user of that output is replaced, pair and all, by one op of plugin/producer_ops.py.

Why a pass and not a model-level hook: vLLM already compiles every model through this graph, a pass
sees each site once whatever the model class, and an eager run (eval mode, CHECKALL) runs no pass,
so it stays the unfused reference (CHECKALL runs the fused producers beside it:
plugin/checkall_producers.py). It is installed as inductor's `post_grad_custom_post_pass`, which
vLLM runs after its own fusions and before lowering its IR ops; its uuid keys inductor's cache.
vLLM's allreduce + RMSNorm fusion (TP > 1, where it runs) takes its norms first.
"""

from __future__ import annotations

import functools
import inspect
import logging
import operator
import sys
from collections import Counter

import torch
import torch.nn.functional as F
from torch import fx
from torch._inductor import pattern_matcher as pm
from torch._guards import detect_fake_mode
from torch.utils._pytree import tree_map
from vllm.compilation.passes.inductor_pass import InductorPass

from radiance.kernels import ops
from radiance.knobs import knob
from radiance.plugin import custom_op

log = logging.getLogger("radiance.plugin")
POST_PASS = "post_grad_custom_post_pass"
VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default)


def _silu_mul(gu: torch.Tensor) -> torch.Tensor:
    d = gu.shape[-1] // 2
    return F.silu(gu[..., :d]) * gu[..., d:]  # SiluAndMul.forward_native


@functools.cache
def silu_mul_patterns() -> tuple:
    """SiluAndMul's post-grad form, traced here for each activation dtype (fp32 has no casts)."""
    found = {}
    for dt in (torch.bfloat16, torch.float32):
        gm = pm.fwd_only(_silu_mul, [torch.empty(4, 16, dtype=dt)])
        pat = pm.fx_to_pattern(gm, ignore_types=(int, float, torch.dtype), argnames=("gu",))
        found[str(pat)] = pat
    return tuple(found.values())


def fusable(key: str) -> tuple[bool, str]:
    """Whether the linear behind op key `key` can take a producer, and why not."""
    layer = custom_op.layer_of(key)
    if layer._radiance_prep is None:
        return False, "not prepared"
    if layer._radiance_gather:
        return False, "replicated (input all-gathered)"
    if layer._radiance_check is not None:
        return False, "gated by RADIANCE_PQ_CHECKALL"
    return ops.can_produce(layer._radiance_prep)


class ProducerPass(InductorPass):
    def __init__(self, norms: bool, acts: bool) -> None:
        self.norms, self.acts = norms, acts
        self.graphs: list[Counter] = []  # what it did to each site, per graph it saw

    def uuid(self):
        # this module's whole source: a change to any matcher or rewrite recompiles
        return InductorPass.hash_dict({"source": InductorPass.hash_source(inspect.getsource(sys.modules[__name__])),
                                       "norms": self.norms, "acts": self.acts})

    def __call__(self, graph: fx.Graph) -> None:
        linear = torch.ops.vllm.radiance_linear.default
        order = {n: i for i, n in enumerate(graph.nodes)}
        done: Counter = Counter()
        for node in [n for n in graph.nodes if n.op == "call_function" and n.target == linear]:
            x, bias, key = _linear_args(node)
            ok, why = fusable(key)
            src = _through_views(x)
            site = _norm_site(src) if self.norms else None
            act = None if site or not self.acts else _silu_mul_input(src, custom_op.layer_of(key)._radiance_prep)
            if site is None and act is None:
                continue
            if not ok:
                done[f"left unfused ({why})"] += 1
            elif site is not None:
                done[_fuse_norm(graph, order, node, site, bias, key)] += 1
            else:
                done[_fuse_silu(graph, node, act, bias, key)] += 1
        self.graphs.append(done)
        if done:
            log.info("producers: %s", ", ".join(f"{n} {what}" for what, n in sorted(done.items())))


def _linear_args(node: fx.Node):
    args = list(node.args) + [node.kwargs[k] for k in ("bias", "key") if k in node.kwargs]
    return args[0], args[1], args[2]


def _through_views(x: fx.Node) -> fx.Node:
    # radiance_linear reshapes its input to [-1, K]; on the 2-D activations that is the identity
    while isinstance(x, fx.Node) and x.target in VIEWS and len(x.users) == 1 and _val(x.args[0]).dim() == 2:
        x = x.args[0]
    return x


def _val(n):
    return n.meta["val"] if isinstance(n, fx.Node) else n


def _norm_site(src: fx.Node):
    """(norm node, (x, residual or None, weight, eps), the residual out's getitems) when src is a
    norm's output used once."""
    if not isinstance(src, fx.Node) or len(src.users) != 1:
        return None
    ir = torch.ops.vllm_ir
    if src.target == ir.rms_norm.default:
        norm, res_out = src, []
        x, res, (w, eps, *rest) = src.args[0], None, src.args[1:]
    elif src.target == operator.getitem and src.args[1] == 0 and src.args[0].target == ir.fused_add_rms_norm.default:
        norm = src.args[0]
        x, res, (w, eps, *rest) = norm.args[0], norm.args[1], norm.args[2:]
        res_out = [u for u in norm.users if u is not src]
        if any(u.target != operator.getitem or u.args[1] != 1 for u in res_out):
            return None
    else:
        return None
    if (rest and rest[0] is not None) or "variance_size" in norm.kwargs or not isinstance(w, fx.Node):
        return None
    xv = _val(x)
    if xv.dim() != 2 or _val(w).dtype != xv.dtype:
        return None
    return norm, (x, res, w, eps), res_out


def _silu_mul_input(src: fx.Node, prep) -> tuple[fx.Node, list[fx.Node]] | None:
    """(gu, the matched nodes) when src is silu(gu[:, :K]) * gu[:, K:] for the linear's K, used once."""
    if not isinstance(src, fx.Node) or len(src.users) != 1 or prep is None:
        return None
    for pat in silu_mul_patterns():
        m = pat.match(src)
        if not pm.is_match(m):
            continue
        gu = m.kwargs["gu"]
        gv = _val(gu)
        slices = [n for n in m.nodes if n.target == torch.ops.aten.slice.Tensor]
        bounds = sorted((n.args[2], n.args[3]) for n in slices)
        if gv.dim() == 2 and gv.shape[1] == 2 * prep.in_features and len(slices) == 2 and \
                all(n.args[1] in (1, -1) for n in slices) and bounds[0] == (0, prep.in_features) and \
                bounds[1][0] == prep.in_features and bounds[1][1] >= 2 * prep.in_features:
            return gu, list(m.nodes)
    return None


def _call(graph: fx.Graph, target, args) -> fx.Node:
    node = graph.call_function(target, args)
    vals = tree_map(_val, args)
    with detect_fake_mode(vals):
        node.meta["val"] = target(*vals)
    return node


def _getitem(graph: fx.Graph, node: fx.Node, i: int) -> fx.Node:
    g = graph.call_function(operator.getitem, (node, i))
    g.meta["val"] = node.meta["val"][i]
    return g


def _erase_unused(graph: fx.Graph, nodes) -> None:
    pending = list(dict.fromkeys(nodes))
    while pending:
        gone = [n for n in pending if not n.users]
        for n in gone:
            graph.erase_node(n)
        pending = [n for n in pending if n not in gone]
        if not gone:
            return


def _fuse_norm(graph, order, node, site, bias, key) -> str:
    norm, (x, res, w, eps), res_out = site
    if isinstance(bias, fx.Node) and order.get(bias, -1) > order[norm]:
        return "left unfused (bias defined after the norm)"
    with graph.inserting_after(norm):  # where the norm was: the residual's users all follow
        if res is None:
            fused = y = _call(graph, torch.ops.vllm.radiance_rms_norm_linear.default, (x, w, eps, bias, key))
        else:
            fused = _call(graph, torch.ops.vllm.radiance_add_rms_norm_linear.default, (x, res, w, eps, bias, key))
    if res is not None:
        with graph.inserting_after(fused):
            r = _getitem(graph, fused, 1)
        with graph.inserting_after(fused):
            y = _getitem(graph, fused, 0)
        for g in res_out:
            g.replace_all_uses_with(r)
    views = _view_chain(node)
    node.replace_all_uses_with(y)
    _erase_unused(graph, [node, *views, *res_out, *norm.users, norm])
    return "norm -> linear fused"


def _fuse_silu(graph, node, act, bias, key) -> str:
    gu, matched = act
    with graph.inserting_before(node):
        y = _call(graph, torch.ops.vllm.radiance_silu_mul_linear.default, (gu, bias, key))
    views = _view_chain(node)
    node.replace_all_uses_with(y)
    _erase_unused(graph, [node, *views, *matched])
    return "silu-mul -> linear fused"


def _view_chain(node: fx.Node) -> list[fx.Node]:
    out, x = [], node.args[0]
    while isinstance(x, fx.Node) and x is not _through_views(x):
        out.append(x)
        x = x.args[0]
    return out


def install(cfg, asked: tuple[bool, bool]) -> None:
    """Put the pass into the vLLM config being built (the quant config's get_quant_method runs before
    vLLM's compiler copies it) when the KernelConfig asks for producers (RADIANCE_PQ_ROT_STREAM /
    _ROT_STREAM2: (norms, silu-mul))."""
    norms, acts = asked
    if not (norms or acts) or cfg is None:
        return
    cc = cfg.compilation_config
    current = cc.inductor_compile_config.get(POST_PASS)
    if isinstance(current, ProducerPass):
        return
    from vllm.config import CompilationMode
    from vllm.platforms import current_platform

    if not (current_platform.is_cuda() or current_platform.is_rocm()):
        raise ValueError("RADIANCE_PQ_ROT_STREAM / RADIANCE_PQ_ROT_STREAM2=1: the fused producers run on NVIDIA and "
                         f"AMD (gfx1201) GPUs (this is {current_platform.device_name}); unset them")
    if current is not None:
        raise ValueError(f"RADIANCE_PQ_ROT_STREAM / _ROT_STREAM2 need inductor's {POST_PASS}, which this launch already "
                         f"sets to {current!r}; unset the knobs or that option")
    if (cfg.model_config is not None and cfg.model_config.enforce_eager) or cc.mode != CompilationMode.VLLM_COMPILE:
        log.info("producers: not fused (an eager or uncompiled run takes no graph pass; the unfused ops run%s)",
                 "; CHECKALL runs the fused ones beside them" if knob("RADIANCE_PQ_CHECKALL") else "")
        return
    cc.inductor_compile_config[POST_PASS] = ProducerPass(norms, acts)
    log.info("producers: fusing %s into the rotated linears' prologues",
             " and ".join(w for w, on in (("norms", norms), ("silu-mul", acts)) if on))
