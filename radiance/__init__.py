"""radiance: quantized LLM serving on consumer GPUs with vLLM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("radiance")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+src"
