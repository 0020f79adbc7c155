"""Adapter for cuzk, Filecoin's production GPU prover: its logs and status endpoint as provetop
telemetry (see ``docs/cuzk.md``). ``parse`` reads lines, ``convert`` turns them into events,
``follow`` and ``status`` read a live daemon, ``source`` feeds the dashboard."""
