"""``provetop trace``: any CUDA program's memory calls and pools, as the engine's telemetry.

The injection library (``kernels/cuda/src/inject/``) records inside the traced program; the
``provetop.sources.trace`` modules turn its records into events; this package runs the program and
puts
those events on a bus as the engine does (socket, recording, /metrics), with NVML beside them.
It sits above ``engine`` (it uses the engine's bus and server) and ``sources`` (the decoder),
and below nothing but the command line; it never imports Textual.
"""
