"""The run's settings: the configuration and presets, and the PROVETOP_* tuning record. Settings
own their defaults; they never import the modules they configure."""
