"""Ops: vllm-switch, radiance setup and render, the example stack file (docs/deploying.md)."""
