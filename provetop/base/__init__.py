"""The ground floor every package may import: UsageError, __version__, byte sizes, the NVML
reading. Nothing here imports another module of ours."""
