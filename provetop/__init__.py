"""provetop: a GPU Groth16 proving engine for BLS12-381 and a dashboard for its operators."""

__version__ = "0.1.0"
