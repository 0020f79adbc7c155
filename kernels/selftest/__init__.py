"""``provetop selftest``: prove, on a new host and before proving anything, that every kernel of
the chosen backend agrees with the exact reference.

``registry`` (a check, its result, running one), ``rows_cpu`` (the CPU reference's rows),
``rows_backend`` (any backend against the reference), ``rows_cuda`` (the GPU modules' rows) and
``runner`` (which rows a backend has; running them). Product modules never import this package.
"""
