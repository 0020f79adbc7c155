"""Device memory behind one interface: modeled on the cpu backend, real pools on cuda."""
