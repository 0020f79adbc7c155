"""The one exception every layer may raise for a bad argument or input.

A leaf module (it imports nothing of ours), so a benchmark in ``kernels`` or ``engine`` can
report a bad flag the way the command line does (one line, exit code 2) without importing the
command line above it.
"""


class UsageError(Exception):
    """A bad argument or input: reported as one line and exit code 2."""
