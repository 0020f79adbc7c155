"""One module per ``provetop`` subcommand: ``add_parser(subparsers, name, help)`` and ``run(args)``."""
