"""Event sources: what feeds telemetry events to a reader that is not the engine itself.

A live engine over its socket, a recording file, a cuzk prover's log and status endpoint. The
dashboard consumes them; so can a script or an exporter, without loading the UI.
"""
