"""The Gluon names that moved between the Triton releases radiance runs on, in one place.

The lent H200 has Triton 3.6; the vLLM images users run on their sm_86 / sm_75 cards bring newer
ones (torch 2.13 pulls Triton 3.9), where the global -> shared copies were renamed and the old
names kept only to raise ("async_copy_global_to_shared has been removed; call async_load
instead"). The kernels call these aliases; `kernels/tests/test_offline_compile.py` compiles every
kernel the tables pick, for sm_75 / sm_86 / sm_90, with whichever Triton is installed.
"""

from triton.experimental.gluon import language as _gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as _async_copy
from triton.experimental.gluon.language.nvidia.hopper import tma as _tma

# cp.async of a pointer tensor into a shared-memory descriptor of its shape: (smem, pointer, mask=None)
copy_to_shared = getattr(_async_copy, "async_load", None) or _async_copy.async_copy_global_to_shared
# a TMA box into shared memory, completing on an mbarrier: (descriptor, coordinates, barrier, smem)
tma_load = getattr(_tma, "async_load", None) or _tma.async_copy_global_to_shared
# a CTA-wide barrier (bar.sync) between plain shared-memory accesses: `barrier()` from Triton 3.9 on
thread_barrier = getattr(_gl, "thread_barrier", None) or _gl.barrier
