"""Every subcommand's flags, one module per command, each importing only argparse and these
light modules: building the whole parser (``--help``) loads nothing a command runs."""
