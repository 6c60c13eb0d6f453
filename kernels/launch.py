"""A Triton kernel's launch plan: the first call goes through Triton's launcher (compiles, binds),
later calls straight to the compiled kernel (tens of µs of Python per launch saved outside CUDA
graphs). Shared by the per-layer ops modules."""

from __future__ import annotations

from radiance.kernels.triton import interpreting

INTERPRET = interpreting()  # CPU interpreter: no PTX, no libdevice


class Launch:
    """One kernel at one tile: the first call goes through Triton's launcher (compiles, binds);
    later calls go straight to the compiled kernel with the same argument order. pdl: launched
    dependent on the kernel before it (kernels/pdl.py)."""

    def __init__(self, fn, consts: dict, warps: int, stages: int, maxnreg: int = 0, pdl: bool = False):
        self.fn, self.consts, self.warps, self.stages = fn, consts, warps, stages
        # the direct launch passes every constexpr positionally, in order, defaulted ones too (a
        # missing one fails there as "function takes exactly N arguments"); the interpreter's
        # functions have no params
        names = [q.name for q in getattr(fn, "params", ()) if q.is_constexpr]
        if names and list(consts) != names:
            raise TypeError(f"{fn.__name__}: launch plan constexprs {list(consts)} must be exactly {names}, in order")
        self.options = ({"maxnreg": maxnreg} if maxnreg else {}) | ({"launch_pdl": True} if pdl else {})
        self.compiled = None

    def __call__(self, grid, *args):
        if self.compiled is None or INTERPRET:
            self.compiled = self.fn[grid](*args, **self.consts, num_warps=self.warps, num_stages=self.stages,
                                          **self.options)
        else:
            # the compiled launcher takes exactly three grid dims and every argument, constexprs too
            self.compiled[tuple(grid) + (1,) * (3 - len(grid))](*args, *self.consts.values())
