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


def test_the_commit_says_dirty_when_the_files_differ_from_head(tmp_path, monkeypatch):
    """A copy of the tree whose git metadata lags its files (the device machine's) names its
    HEAD with "+dirty"; PROVETOP_COMMIT, when given, wins; outside git, "unknown"."""
    import shutil
    import subprocess

    from kernels.bench_meta import commit_of
    from kernels.tuning import KernelTuning

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
