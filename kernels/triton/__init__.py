"""The NVIDIA kernels in Triton and Gluon (docs/nvidia.md)."""

import os


def interpreting() -> bool:
    """True under Triton's CPU interpreter (TRITON_INTERPRET=1, read when the kernels are
    decorated): no inline PTX, no libdevice, no Gluon -- kernels take their spelled-out paths."""
    return os.environ.get("TRITON_INTERPRET") == "1"
