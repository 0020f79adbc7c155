"""provetop: a GPU Groth16 proving engine for BLS12-381 and a dashboard for its operators."""

from provetop.base.version import __version__

__all__ = ["__version__"]
