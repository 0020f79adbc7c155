"""What a partition proves: the workload's sizes, the synthetic witness (on the host or the GPU)
and the SRS with known secrets."""
