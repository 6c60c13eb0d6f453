"""radiance's vLLM plugin: quantization methods `paroquant`, `paroquant_mxfp4` and `pq2`.

`register` is the `vllm.general_plugins` entry point. vLLM runs it in every process (API server,
engine core, each TP worker). vLLM only logs a plugin whose *import* fails, so this module imports
nothing heavy: every import happens inside `register`, and any failure there raises out of vLLM's
`load_general_plugins`, which stops the launch (plugin/tests/test_register.py proves it).
"""

from __future__ import annotations

_registered = False


def register() -> None:
    """Register the quant configs, the v2 weight loaders and the custom op (idempotent)."""
    global _registered
    if _registered:
        return
    try:
        from radiance.plugin import hooks

        hooks.register_all()
    except Exception as exc:
        raise RuntimeError(
            f"radiance vLLM plugin failed to register ({type(exc).__name__}: {exc}); "
            "paroquant/paroquant_mxfp4/pq2 checkpoints cannot be served. Check that vllm and radiance versions match."
        ) from exc
    _registered = True


def check_registered(method: str) -> None:
    """Raise unless `method` is served by this plugin in this process (for the launcher, which
    must not import vLLM itself: the plugin is the only package that does)."""
    register()
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, get_quantization_config

    if method not in QUANTIZATION_METHODS or not get_quantization_config(method).__module__.startswith("radiance."):
        raise RuntimeError(f"quantization method {method!r} is not registered by the radiance plugin")
