"""No command destroys a recording or any existing file: ``export -o`` at its own input (also
through a symlink or a hard link), over an existing file, at a path the kernel cannot take;
and what the product creates is private whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from provetop.cli import main
from provetop.recordings.reader import open_recording
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import make_run


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "run.pvtrec"
    with RecordingWriter(path) as w:
        for e in make_run(partitions=3):
            w.write(e)
    return path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("provetop: error:"), err
    return err[0]


def _export(*args: object) -> int:
    return main(["export", *map(str, args)])


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_export_never_writes_over_its_own_recording(recording, tmp_path, capsys, how):
    before = recording.read_bytes()
    out = recording
    if how == "symlink":
        out = tmp_path / "alias.json"
        out.symlink_to(recording)
    elif how == "hard link":
        out = tmp_path / "hard.json"
        os.link(recording, out)
    for force in ([], ["--force"]):  # not even with --force
        assert _export(recording, "-o", out, *force) == 2
        assert "is the input recording; it is never overwritten" in _error(capsys)
    assert recording.read_bytes() == before
    open_recording(recording)


def test_export_over_an_existing_file_needs_force_and_never_widens_its_mode(
    recording, tmp_path, capsys
):
    out = tmp_path / "trace.json"
    out.write_text("precious")
    os.chmod(out, 0o600)
    assert _export(recording, "-o", out) == 2
    assert "exists; pass --force to replace it" in _error(capsys)
    assert out.read_text() == "precious"
    assert _export(recording, "-o", out, "--force") == 0
    capsys.readouterr()
    assert out.read_text().startswith("{") and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_path_too_long_for_the_kernel_is_one_line(recording, tmp_path, capsys):
    assert _export(recording, "-o", tmp_path / ("x" * 5000)) == 2
    assert "bytes long" in _error(capsys)
    deep = "/".join(["d" * 200] * 25)
    assert _export(recording, "-o", tmp_path / deep) == 2
    assert "bytes long" in _error(capsys)


def test_files_and_directories_the_product_creates_are_private_under_umask_000(
    recording, tmp_path, capsys
):
    old = os.umask(0)
    try:
        nested = tmp_path / "new" / "dirs" / "run.pvtrec"
        with RecordingWriter(nested) as w:
            for e in make_run(partitions=1):
                w.write(e)
        out = tmp_path / "t.json"
        assert _export(recording, "-o", out) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    assert stat.S_IMODE(nested.stat().st_mode) == 0o600
    assert stat.S_IMODE(nested.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
