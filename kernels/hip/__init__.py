"""The gfx1201 paroquant kernels in HIP, built by hipcc at container start (docs/gfx1201.md)."""
