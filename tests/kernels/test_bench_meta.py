"""The benchmark metadata every GPU result carries."""

from provetop.kernels.bench_meta import bench_command


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


def test_the_commit_says_dirty_when_the_files_differ_from_head(tmp_path, monkeypatch):
    """A copy of the tree whose git metadata lags its files (the device machine's) names its
    HEAD with "+dirty"; PROVETOP_COMMIT, when given, wins; outside git, "unknown"."""
    import shutil
    import subprocess

    from provetop.kernels.bench_meta import commit_of
    from provetop.kernels.tuning import KernelTuning

    if shutil.which("git") is None:
        import pytest

        pytest.skip("no git on this machine")
    monkeypatch.chdir(tmp_path)
    assert commit_of(None) == "unknown"
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "provetop test")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "test@provetop.invalid")
    subprocess.run(["git", "init", "-q"], check=True)
    (tmp_path / "f.txt").write_text("one\n")
    subprocess.run(["git", "add", "f.txt"], check=True)
    subprocess.run(["git", "commit", "-qm", "one"], check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert commit_of(None) == head
    (tmp_path / "f.txt").write_text("two\n")
    assert commit_of(None) == f"{head}+dirty"
    assert commit_of(KernelTuning(commit="abc1234")) == "abc1234"


def test_gpu_meta_records_the_field_multiplication_units():
    """Every GPU result says which units multiplied (integer for Fr and Fp) beside the device's
    FP32:FP64 ratio, so a result from a card with other FP64 units can be told apart."""
    from types import SimpleNamespace

    from provetop.kernels.bench_meta import gpu_bench_meta

    props = {"name": b"Fake GPU", "multiProcessorCount": 4, "singleToDoublePrecisionPerfRatio": 64}
    runtime = SimpleNamespace(
        getDeviceProperties=lambda i: props,
        driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 13000,
    )
    cuda = SimpleNamespace(
        Device=lambda: SimpleNamespace(id=0, compute_capability="89"),
        runtime=runtime,
        nvrtc=SimpleNamespace(getVersion=lambda: (13, 0)),
    )
    meta = gpu_bench_meta(SimpleNamespace(cuda=cuda, __version__="0"), ["provetop", "bench"])
    assert meta["gpu"] == "Fake GPU"
    assert meta["field_mul"]["fr"] == meta["field_mul"]["fp"] == "integer"
    assert meta["field_mul"]["fp32_per_fp64"] == 64
