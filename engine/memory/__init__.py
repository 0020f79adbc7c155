"""Device memory decisions: a partition's footprint and policy, the start-up plan, the SRS's
residency, pinned host memory, and the per-device ledger, hand-over and fence that let two
workers share one card."""
