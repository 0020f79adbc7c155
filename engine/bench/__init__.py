"""The engine's benchmarks (`provetop bench cpu|pipeline|soak`, the memory sweep and its plot):
they drive a whole Engine, so they stand above it."""
