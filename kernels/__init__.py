"""The kernels: exact reference numerics, checkpoint formats, Triton/Gluon (NVIDIA), HIP (gfx1201), the build step."""
