"""The benchmark metadata every GPU result carries."""

from kernels.bench_meta import bench_command


def test_bench_command_as_a_user_types_it():
    assert bench_command(["/x/provetop/__main__.py", "bench", "ntt", "--json"]) == [
        "provetop",
        "bench",
        "ntt",
        "--json",
    ]
    assert bench_command(["/usr/bin/provetop", "bench", "msm"])[0] == "provetop"
    assert bench_command(["bench_msm.py", "--log-sizes", "20"])[0] == "bench_msm.py"
    assert bench_command([]) == []
