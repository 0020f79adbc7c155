#!/usr/bin/env bash
# Prints the folder where gmpy2 (a dependency of the package that the GPU image lacks) was
# installed from its wheel carried in .whl, or nothing when no wheel was carried. The GPU
# scripts put it on PYTHONPATH, so the MSM's host window combination runs as an installed
# provetop runs it. Get the wheel with: pip download gmpy2 --only-binary=:all:
# --python-version 3.12 --platform manylinux_2_28_x86_64 --no-deps -d .whl
if ls .whl/gmpy2-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/gmpy2-*.whl >&2 && echo /tmp/site
fi
