"""What leaves the engine: the event bus, the recorder's thread, the socket server and its control
commands, the /metrics endpoint, memory samples and start-up progress."""
