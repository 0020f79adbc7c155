"""BLS12-381 arithmetic, NTT, MSM and SRS generation: exact CPU reference and CUDA kernels."""
