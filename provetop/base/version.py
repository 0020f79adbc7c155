"""The release version: one leaf module, read by the package build (pyproject.toml), the
command line, and the writers of recordings."""

__version__ = "0.1.0"
