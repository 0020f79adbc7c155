"""The engine as a running process: the Engine object, the workers and their scheduler, a CUDA
run's set-up, the command-line flags, the heap trimmer."""
