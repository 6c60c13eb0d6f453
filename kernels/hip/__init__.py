"""The gfx1201 paroquant kernels in HIP, built by hipcc at container start (docs/gfx1201.md).

No torch here: the launcher checks a stack against the decode kernels' row limit without it."""

# the decode kernels' largest M (pq_gemm.hip, pq_mxfp4_gemm.hip): RADIANCE_PQ_DECODE_MAX_M above it
# cannot be served on gfx1201 (the registry's hip_decode refuses it; the launcher refuses the stack)
DECODE_MAX_ROWS = 64
