"""Telemetry schema, state reducer, recording files and their readers."""
