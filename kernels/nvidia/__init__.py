"""The NVIDIA kernels by kind: one module per kernel kind (kernels/nvidia/<method>/<kind>.py) owns
the rows it is meant for and the cards it runs on (its registry entries), the activations it reads,
its tile and shared memory, and its launch; each method's package lists them in priority order
(`KERNELS`, what kernels/registry.py plans from). `tile.Tile` is every kind's tile, with the cards'
tuned ones in kernels/tiles/<arch>.json; `pool` is the one scratch pool of split-K partials, tickets
and dequantized weights. The Triton / Gluon kernels themselves are in kernels/triton/."""
