"""Making checkpoints: fetch-model, quantize (RTN and learned rotations), import-gguf, eval."""
