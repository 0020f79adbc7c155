"""One module per ``provetop`` subcommand.

Each provides ``add_parser(subparsers, name, help)`` and ``run(args) -> int``.
"""
