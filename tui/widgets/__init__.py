"""The dashboard's panels: each one draws a piece of the reduced state (one widget per file)."""
