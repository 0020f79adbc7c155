"""The CUDA backend: our CUDA C sources (``src/``, one folder per layer) and the Python that
loads and launches them.

``runtime`` is the one loader (prebuilt cubin or NVRTC, one module cache); ``ntt``, ``fr``,
``msm``, ``srs`` and ``check`` launch the kernels of one source each; ``backend`` composes them
into ``provetop.kernels.backend.KernelBackend``. ``kernels/cuda/README.md`` maps the layers to
modules.
Nothing here imports CuPy at import time: ``runtime.require_cupy`` does, when a kernel runs.
"""
