"""The exact CPU reference: field, curve, NTT, MSM and SRS arithmetic on Python ints.

Every GPU kernel is tested against these modules, and ``provetop.kernels.cpu_backend`` wraps them
as the
no-GPU backend. gmpy2 and py-arkworks-bls12381 speed parts up when installed; nothing here
requires them.
"""
