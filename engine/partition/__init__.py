"""One partition, top to bottom: the driver, the steps a backend implements (cpu and cuda), fault
injection and the test hold points."""
