"""radiance-launch: stack schema, device detection, kernels, chat template, compile caches, exec vLLM (docs/stack-file.md)."""
