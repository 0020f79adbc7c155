"""The flags of ``provetop import-cuzk`` (a cuzk log as a recording).

Why apart from the command: ``provetop --help`` and ``provetop import-cuzk --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.import_cuzk`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name,
        help=help_text,
        description="Turn a cuzk daemon log (and saved /status bodies) into a provetop recording.",
    )
    parser.add_argument("log", metavar="LOG", help="cuzk daemon log file, or - for stdin")
    parser.add_argument(
        "--status-snapshots",
        metavar="DIR",
        help="directory of saved GET /status bodies (*.json), merged by their uptime_secs",
    )
    parser.add_argument("-o", "--output", metavar="RECORDING", required=True)
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing RECORDING (never the input log itself)",
    )
    parser.add_argument(
        "--workers-per-device",
        type=int,
        default=2,
        metavar="N",
        help="cuzk's gpus.gpu_workers_per_device, to place workers on GPUs when no status "
        "snapshot says (default 2)",
    )
    parser.add_argument("--host", help="host name to record (default: this machine's)")
