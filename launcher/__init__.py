"""radiance-launch: stack schema, device detection, kernels, chat template, compile caches, vLLM under supervision (docs/stack-file.md)."""
