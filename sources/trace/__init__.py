"""What ``provetop trace`` reads: the record stream of the injection library
(``kernels/cuda/src/inject/``, layout in ``docs/trace-records.md``) decoded (``records``) and
turned into the engine's telemetry events (``events``).

Nothing here loads CUDA, the engine or the kernels: a stream from another machine, or a file
left by a killed program, decodes anywhere.
"""
