"""The one CUDA loader (provetop.kernels.cuda.runtime), the source identity and the prebuilt-cubin
lookup,
on the CPU: a FAKE CuPy stands in for the real one (it records what the loader asks of it and
proves nothing about CUDA; the GPU tests and ``provetop warmup`` on the device machine do)."""

from __future__ import annotations

import shutil
import threading
import time
import types
from pathlib import Path

import pytest

from provetop.cli import main
from provetop.kernels.cuda import cubins, runtime, sources

# --- sources ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sources.SOURCES)
def test_every_source_expands_to_text_without_local_includes(name) -> None:
    text = sources.expand(name)
    assert '#include "' not in text  # every local include inlined (<stdint.h> style stays)
    assert "#pragma once" not in text
    assert 'extern "C" __global__' in text


def test_the_hash_names_one_build() -> None:
    a = sources.source_hash("ntt/ntt.cu")
    assert a == sources.source_hash("ntt/ntt.cu", ())
    assert a != sources.source_hash("ntt/ntt.cu", (("NTT_MIN_BLOCKS", "2"),))
    assert a != sources.source_hash("msm/msm.cu")
    assert sources.normalize_defines({"B": 2, "A": "x"}) == (("A", "x"), ("B", "2"))
    assert sources.normalize_defines([("A", 1)]) == (("A", "1"),)
    assert sources.nvrtc_options((("A", "1"),))[-1] == "-DA=1"


def test_cubin_names_carry_layer_hash_and_arch(tmp_path) -> None:
    path = cubins.cubin_path("msm/msm.cu", (), "sm_90", tmp_path)
    assert path.parent == tmp_path / "msm"
    assert path.name == f"msm-{sources.source_hash('msm/msm.cu')}-sm_90.cubin"
    assert cubins.find("msm/msm.cu", (), "sm_90", tmp_path) is None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"cubin")
    assert cubins.find("msm/msm.cu", (), "sm_90", tmp_path) == path
    assert cubins.find("msm/msm.cu", (), "sm_86", tmp_path) is None  # exact arch only
    assert cubins.find("msm/msm.cu", (("X", "1"),), "sm_90", tmp_path) is None  # exact defines
    cmd = cubins.nvcc_command("msm/msm.cu", "sm_90", path)
    assert cmd[:3] == ["nvcc", "-cubin", "-arch=sm_90"] and f"-I{sources.SRC_DIR}" in cmd
    assert {"sm_80", "sm_86", "sm_89", "sm_90"} <= set(cubins.ARCHS)


# --- the loader, with a fake CuPy ------------------------------------------------------------


class FakeRawModule:
    """Records how it was made; ``refuse`` makes a cubin load fail as an old driver would."""

    made: list[dict] = []
    refuse = False
    compile_s = 0.0

    def __init__(self, *, code=None, path=None, options=(), backend="nvrtc") -> None:
        self.kind = "path" if path is not None else "code"
        FakeRawModule.made.append({"code": code, "path": path, "options": options})
        self.functions: list[str] = []

    def compile(self) -> None:
        if self.kind == "path" and FakeRawModule.refuse:
            raise RuntimeError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        time.sleep(FakeRawModule.compile_s)

    def get_function(self, name: str) -> str:
        self.functions.append(name)
        return f"fn:{name}"


class FakeDevice:
    current = 0

    def __init__(self, dev=None) -> None:
        self.id = FakeDevice.current if dev is None else dev
        self.compute_capability = "90"

    def __enter__(self):
        self.prev, FakeDevice.current = FakeDevice.current, self.id
        return self

    def __exit__(self, *exc) -> None:
        FakeDevice.current = self.prev


@pytest.fixture
def fake_cupy(monkeypatch, tmp_path):
    FakeRawModule.made, FakeRawModule.refuse, FakeRawModule.compile_s = [], False, 0.0
    cupy = types.SimpleNamespace(
        RawModule=FakeRawModule,
        cuda=types.SimpleNamespace(
            Device=FakeDevice, runtime=types.SimpleNamespace(getDeviceCount=lambda: 2)
        ),
    )
    monkeypatch.setattr(runtime, "require_cupy", lambda: cupy)
    monkeypatch.setattr(runtime, "_cache", {})
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cupy-cache"))
    return cupy


def test_nvrtc_compile_is_announced_once_per_machine_and_cached_per_key(fake_cupy) -> None:
    lines: list[str] = []
    mod = runtime.load("checks/fr_check.cu", log=lines.append, cubin_dir="/nonexistent")
    assert mod.origin == "nvrtc" and mod.arch == "sm_90" and mod.device == 0
    assert "compiling checks/fr_check.cu for sm_90 with NVRTC (first use" in lines[0]
    assert lines[1].startswith("compiled checks/fr_check.cu for sm_90 with NVRTC in")
    made = FakeRawModule.made[0]
    assert made["code"] == sources.expand("checks/fr_check.cu")
    assert made["options"] == sources.nvrtc_options(())
    # the same key: the cached module, nothing compiled, nothing said
    assert runtime.load("checks/fr_check.cu", log=lines.append) is mod
    assert len(FakeRawModule.made) == 1 and len(lines) == 2
    # another device or other defines: another module
    other = runtime.load("checks/fr_check.cu", device=1, log=lines.append)
    assert other is not mod and other.device == 1
    # a new process (empty in-process cache) finds the marker: CuPy's disk cache, quiet
    runtime._cache.clear()
    lines.clear()
    runtime.load("checks/fr_check.cu", log=lines.append)
    assert lines == []
    assert mod.get_function("fr_dot_powers") == "fn:fr_dot_powers"
    mod.get_function("fr_dot_powers")
    assert mod.raw.functions == ["fr_dot_powers"]  # looked up once


def test_a_matching_cubin_is_loaded_and_a_refused_one_falls_back(fake_cupy, tmp_path) -> None:
    folder = tmp_path / "cubin"
    path = cubins.cubin_path("srs/srs.cu", (), "sm_90", folder)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not really a cubin")
    lines: list[str] = []
    mod = runtime.load("srs/srs.cu", cubin_dir=folder, log=lines.append)
    assert (mod.origin, mod.path, lines) == ("cubin", path, [])
    assert FakeRawModule.made[-1]["path"] == str(path)
    runtime._cache.clear()
    FakeRawModule.refuse = True
    mod = runtime.load("srs/srs.cu", cubin_dir=folder, log=lines.append)
    assert mod.origin == "nvrtc"
    assert "did not load (RuntimeError: CUDA_ERROR_UNSUPPORTED_PTX_VERSION)" in lines[0]
    assert "compiling srs/srs.cu with NVRTC instead" in lines[0]


def test_concurrent_loads_of_one_key_compile_once(fake_cupy) -> None:
    FakeRawModule.compile_s = 0.05
    got: list[object] = []

    def worker() -> None:
        got.append(runtime.load("ntt/ntt.cu", defines={"NTT_MIN_BLOCKS": 2}, log=lambda s: None))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(FakeRawModule.made) == 1 and all(m is got[0] for m in got)
    assert FakeRawModule.made[0]["options"][-1] == "-DNTT_MIN_BLOCKS=2"


def test_warm_loads_every_source_a_run_uses_on_every_device(fake_cupy) -> None:
    from provetop.kernels.cuda.warmup import warm
    from provetop.kernels.tuning import KernelTuning

    seen = []
    done = warm(KernelTuning(ntt_defines=(("A", "1"),)), on_module=seen.append, log=lambda s: None)
    used = list(sources.SOURCES)
    assert [(w.device, w.source) for w in done] == [(d, s) for d in (0, 1) for s in used]
    assert seen == done
    assert done[0].defines == (("A", "1"),) and all(not w.defines for w in done[1:4])


def test_prebuild_missing_compiles_only_what_has_no_cubin(tmp_path) -> None:
    """A stand-in nvcc (a script that writes the -o file) shows which builds are compiled:
    each (build, arch) without a cubin on the search path, once."""
    from provetop.kernels.cuda.warmup import builds, prebuild_missing
    from provetop.kernels.tuning import KernelTuning

    log = tmp_path / "calls"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'while [ "$1" != "-o" ]; do shift; done; echo cubin > "$2"\n'
    )
    nvcc.chmod(0o755)
    tuning = KernelTuning(cubin_dir=str(tmp_path / "cubin"))
    needed = builds(tuning)
    first = prebuild_missing(needed, ["sm_90"], tuning, nvcc=str(nvcc))
    assert sorted(b.source for b in first) == sorted(s for s, _ in needed)
    assert all(not b.error for b in first)
    assert len(log.read_text().splitlines()) == len(needed)
    again = prebuild_missing(needed, ["sm_90"], tuning, nvcc=str(nvcc))
    assert again == [] and len(log.read_text().splitlines()) == len(needed)
    for src, defs in needed:
        assert cubins.find(src, defs, "sm_90", cubins.search_path(tuning.cubin_dir)) is not None


# --- the commands, where there is no GPU -----------------------------------------------------


def test_warmup_without_a_gpu(monkeypatch, capsys) -> None:
    def missing():
        raise runtime.CudaUnavailable("CuPy is not importable (test)")

    monkeypatch.setattr(runtime, "require_cupy", missing)
    assert main(["warmup"]) == 0
    assert "no GPU here" in capsys.readouterr().out
    assert main(["warmup", "--backend", "cuda"]) == 2
    assert "warmup --backend cuda: CuPy is not importable" in capsys.readouterr().err
    assert main(["warmup", "--backend", "cpu"]) == 0
    monkeypatch.setenv("PROVETOP_MSM_SORT", "bitonic")
    assert main(["warmup"]) == 2


def test_prebuild_without_nvcc_says_so(capsys, tmp_path) -> None:
    from provetop.kernels.cuda import prebuild

    rc = prebuild.main(["--nvcc", "no-such-nvcc", "--out", str(tmp_path)])
    assert rc == 1 and "no-such-nvcc not found" in capsys.readouterr().err


def test_prebuild_reports_a_failed_compile(capsys, tmp_path) -> None:
    from provetop.kernels.cuda import prebuild

    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'error: no such arch' >&2\nexit 1\n")
    fake.chmod(0o755)
    rc = prebuild.main(
        ["--nvcc", str(fake), "--out", str(tmp_path / "c"), "--source", "srs/srs.cu", "--arch",
         "sm_90"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "nvcc failed on srs/srs.cu for sm_90" in err and "no such arch" in err
    assert not list((tmp_path / "c").rglob("*.cubin"))  # no half-written cubin left


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
@pytest.mark.nvcc
@pytest.mark.slow
def test_prebuild_builds_a_cubin_with_nvcc(tmp_path) -> None:
    """The real nvcc on the smallest source (ntt.cu takes about a minute on two cores)."""
    from provetop.kernels.cuda import prebuild

    out = tmp_path / "cubin"
    assert prebuild.main(["--out", str(out), "--source", "ntt/ntt.cu", "--arch", "sm_90"]) == 0
    path = cubins.find("ntt/ntt.cu", (), "sm_90", out)
    assert path is not None and path.read_bytes()[:4] == b"\x7fELF"


def test_no_product_module_imports_the_self_test() -> None:
    root = Path(__file__).resolve().parents[2] / "kernels"
    for path in root.rglob("*.py"):
        if "selftest" in path.parts:
            continue
        assert "provetop.kernels.selftest" not in path.read_text(), path


def test_the_install_hint_names_the_extras_of_pyproject():
    import re
    import tomllib
    from pathlib import Path

    from provetop.kernels.cuda.runtime import INSTALL_HINT

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extras = {k for k in meta["project"]["optional-dependencies"] if k.startswith("cuda")}
    assert extras and set(re.findall(r"provetop\[(\w+)\]", INSTALL_HINT)) == extras
