"""provetop: a GPU Groth16 proving engine for BLS12-381 and a dashboard for its operators.

Every part is imported under this one name (``provetop.engine``, ``provetop.kernels``,
``provetop.tui``, ``provetop.sources``, ``provetop.recordings``), so that installing provetop
never collides with PyPI's packages of those bare names. In a source checkout the rooms stay at
the repository's top level and this package reaches them through links of the same names; a
wheel holds them inside it. Where a copy of the checkout lost the links, the repository root is
searched instead.
"""

import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_ROOT = _os.path.dirname(_HERE)
if not _os.path.isdir(_os.path.join(_HERE, "engine")) and _os.path.isfile(
    _os.path.join(_ROOT, "engine", "__init__.py")
):
    __path__.append(_ROOT)

from provetop.base.version import __version__  # noqa: E402

__all__ = ["__version__"]
