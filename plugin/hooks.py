"""Everything `radiance.plugin.register` does, in one place (runs once per vLLM process)."""

from __future__ import annotations

import logging
import sys

from radiance.kernels import methods

log = logging.getLogger("radiance.plugin")


def _setup_logging() -> None:
    # vLLM configures only its own "vllm" logger; give radiance's lines (load decisions,
    # CHECKALL) a handler so they reach the server log at INFO.
    root = logging.getLogger("radiance.plugin")  # only the plugin's own loggers: others set up theirs
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [radiance] %(message)s", "%m-%d %H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False


def register_all() -> None:
    _setup_logging()
    from radiance.compat import check_vllm

    check_vllm()  # a vLLM outside the tested range fails here, naming both versions
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

    from radiance.plugin import custom_op, producer_ops  # they import vLLM: after its version is checked

    custom_op.register_op()
    producer_ops.register_ops()
    served = [s for s in methods.METHODS.values() if s.plugin]
    for spec in served:
        cls = methods.resolve(spec.plugin)  # importing its module registers it with vLLM
        if spec.name not in QUANTIZATION_METHODS or get_quantization_config(spec.name) is not cls:
            raise RuntimeError(f"quantization method {spec.name!r} did not register with vLLM")
    log.debug("registered quantization methods %s", ", ".join(s.name for s in served))
