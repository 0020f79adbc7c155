"""The proving run: workload, partition pipeline, workers, device backends, allocator, telemetry."""
