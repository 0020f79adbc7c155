"""The slim CUDA install on a GPU machine: ``pip install 'provetop[cuda13]'`` into an empty
environment, then the GPU work a new operator does first, with nothing else on the paths.

Why this way: the GPU machine reaches no package index, and the CUDA wheels (CuPy ~70 MB, NVRTC,
CUPTI) are larger than what one call can carry. Everything but the CUDA part travels as wheels
(``.slim/wheels``: provetop's own wheel with its prebuilt cubins, its pure dependencies and the
``cuda-toolkit`` meta-packages); CuPy, ``cuda-pathfinder``, numpy and the NVIDIA runtime, NVRTC
and CUPTI wheels are repacked from the copies the machine's image already has installed (each
distribution's own file list, into a wheel with its own tags), so they are the same files a
download would unpack. pip then resolves ``provetop[cuda13]`` from those two folders alone
(``--no-index``): an extra that needed anything else (cuBLAS, cuFFT, ...) would fail to install.

In the environment: ``selftest --backend cuda``; the backend's warm-up and the selftest in one
process that then lists every library mapped into it, with its folder (each CUDA library must
come from the environment, none of cuBLAS/cuFFT/cuRAND/cuSOLVER/cuSPARSE at all); one small
proof; ``provetop trace`` of a CuPy program (its injection library built from the CUPTI wheel).
The environment's PATH and LD_LIBRARY_PATH keep only the driver's folders (no CUDA toolkit), and
CUDA_PATH/CUDA_HOME are unset. A GPU image also has the toolkit's libraries in the loader's cache
(``ldconfig -p``), where a stranger's slim host has none, and CuPy opens some of them when it
finds them: ``import cupy`` (14.2) preloads cuTENSOR through cuda-pathfinder, which loads
cuTENSOR's dependency cuBLASLt first, from the image's toolkit, before cuTENSOR itself is not
found and the preload gives up (seen on an H100 image, 2026-12-07). So, as root with
``unshare``, every GPU step runs in a private mount namespace with each such library file
covered by an empty one (``mount --bind /dev/null``): the steps then see what a slim host has.
One extra probe
outside it, under ``LD_DEBUG=files``, records which object opened each toolkit library.

Usage on the device machine, from the repository root, with ``.slim`` carried::

    python3 bench/gpu_slim_install.py --out $OUT/slim

Prints a table last; exit 1 when a check failed.

``.slim/wheels`` (ignored by git) is built on a machine with an index, from the repository root::

    python -m provetop.kernels.cuda.prebuild --arch sm_90   # the cubins go into the wheel
    pip wheel --no-deps . -w .slim/wheels
    pip download --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .slim/wheels "textual>=8.0,<9" "msgpack>=1.0.7" \
        "nvidia-ml-py>=12.535" "prometheus-client>=0.20" "gmpy2>=2.2" \
        "py-arkworks-bls12381>=0.4" "py_ecc>=7"
    for v in 13.0.0 13.0.1 13.0.2 13.1.0 13.1.1 13.2.0 13.2.1 13.2.2; do
        pip download --no-deps cuda-toolkit==$v -d .slim/wheels; done
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # an image whose python has pip but not packaging
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# What the CUDA extras name, by the image's CuPy: the distributions to repack from the image.
CUDA_TOPS = {
    "cuda13": ["cupy-cuda13x", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-cupti"],
    "cuda12": [
        "cupy-cuda12x",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-nvrtc-cu12",
        "nvidia-cuda-cupti-cu12",
    ],
}
ALSO_FROM_IMAGE = ["numpy"]  # 16 MB binary wheel: not worth carrying, the image has one
UNUSED = ("libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse")
CUDA_LIB = re.compile(
    r"/(lib(?:cuda|cudart|nvrtc|cupti|nvJitLink|cublas|cufft|curand|cusolver"
    r"|cusparse|provetop_inject)[\w.+-]*\.so[.\d]*)$"
)

PROBE = """
import json, re
from provetop.kernels.cuda.backend import CudaBackend
from provetop.kernels.selftest.runner import run_selftest
CudaBackend().warm_up(12)
ok = all(r.ok for r in run_selftest("cuda"))
paths = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"ok": ok, "paths": paths}))
"""

TRACED = """
import cupy as cp
pool = cp.cuda.MemoryAsyncPool()
cp.cuda.set_allocator(pool.malloc)
a = cp.ones(1 << 28, dtype=cp.uint8)
print("sum", int(a.sum()))
"""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(tops: list[str]) -> list[md.Distribution]:
    """The installed distributions ``tops`` need (their unconditional requirements, recursively)."""
    seen: dict[str, md.Distribution] = {}
    todo = list(tops)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        dist = None
        for each in (name, f"{name}-cu13", f"{name}-cu12"):  # the NVIDIA wheels' two namings
            try:
                dist = md.distribution(each)
                break
            except md.PackageNotFoundError:
                pass
        if dist is None:
            continue  # pip says so below, if it matters
        seen[name] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _repack(dist: md.Distribution, folder: Path) -> Path:
    """A wheel of ``dist`` from its installed files (its RECORD), tagged as its WHEEL file says."""
    name = dist.metadata["Name"].replace("-", "_")
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [
        line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")
    ] or ["py3-none-any"]
    out = folder / f"{name}-{dist.version}-{tags[0]}.whl"
    base = Path(dist.locate_file(""))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    info = None
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for file in dist.files or []:
            rel = file.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue  # scripts outside site-packages; bytecode pip rebuilds
            if rel.endswith(".dist-info/RECORD"):
                info = rel.rsplit("/", 1)[0]
                continue
            path = base / rel
            if not path.is_file():
                continue
            data = path.read_bytes()
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            writer.writerow([rel, f"sha256={digest.decode()}", len(data)])
        if info is None:
            info = f"{name}-{dist.version}.dist-info"
        writer.writerow([f"{info}/RECORD", "", ""])
        zf.writestr(f"{info}/RECORD", record.getvalue())
    return out


def _clean_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment a stranger's slim install runs in: the driver's folders, no toolkit."""
    keep = lambda parts: [p for p in parts if p and "cuda" not in p.lower()]  # noqa: E731
    path = keep(os.environ.get("PATH", "").split(":"))
    lib = keep(os.environ.get("LD_LIBRARY_PATH", "").split(":"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CUDA_PATH", "CUDA_HOME", "CUPY_", "PYTHON", "PROVETOP_"))
    }
    env.update(
        PATH=":".join([str(venv / "bin"), *path]),
        LD_LIBRARY_PATH=":".join(lib),
        HOME=str(home),
        XDG_RUNTIME_DIR=str(home / "run"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_DATA_HOME=str(home / "data"),
        PYTHONUNBUFFERED="1",
    )
    env.pop("VIRTUAL_ENV", None)
    return env


# the toolkit's libraries (not the driver's libcuda/libnvidia-*), which a slim host lacks
TOOLKIT_LIB = re.compile(
    r"^lib(cudart|nvrtc|cupti|nvJitLink|nvjitlink|cublas|cufft|curand|cusolver|cusparse|npp"
    r"|nvjpeg|nvblas|cufile|nvToolsExt|nvfatbin|nvptxcompiler)"
)


def _toolkit_files(site: Path) -> list[str]:
    """The toolkit libraries the loader's cache names outside the environment (real files)."""
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return []
    files = set()
    for line in cache.splitlines():
        name, _, path = line.strip().partition(" => ")
        if TOOLKIT_LIB.match(name.split()[0] if name else "") and str(site) not in path:
            files.add(os.path.realpath(path))
    for root in Path("/usr/local").glob("cuda*"):  # CuPy's pathfinder also looks there
        for f in root.rglob("lib*.so*"):
            if TOOLKIT_LIB.match(f.name) and f.is_file():
                files.add(os.path.realpath(f))
    return sorted(f for f in files if os.path.isfile(f))


def _hidden(cmd: list[str], files: list[str]) -> list[str]:
    """``cmd`` in a private mount namespace where each of ``files`` reads as empty."""
    if not files:
        return cmd
    script = 'n=$1; shift; while [ "$n" -gt 0 ]; do mount --bind /dev/null "$1" || exit 97; '
    script += 'shift; n=$((n-1)); done; exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"] + [
        str(len(files)),
        *files,
        *cmd,
    ]


HIDE: list[str] = []  # set in main(): the files the GPU steps do not see


def _run(
    cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: int, hide: bool = True
) -> tuple[int, float, str]:
    if hide:
        cmd = _hidden(cmd, HIDE)
    t = time.monotonic()
    try:
        done = subprocess.run(
            cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"timed out after {timeout} s\n{e.stdout or ''}{e.stderr or ''}"
    log.write_text(f"$ {' '.join(cmd)}\n{text}\nrc={rc}\n")
    return rc, time.monotonic() - t, text


def _mb(path: Path) -> float:
    return (
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/slim-out"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/slim"))
    args = ap.parse_args()
    out, work = args.out, args.work
    shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, str]] = []
    extra = (
        "cuda13"
        if any(_norm(d.metadata["Name"]) == "cupy-cuda13x" for d in md.distributions())
        else "cuda12"
    )

    repacked = work / "repacked"
    repacked.mkdir(parents=True)
    t = time.monotonic()
    dists = _closure(CUDA_TOPS[extra] + ALSO_FROM_IMAGE)
    for dist in dists:
        _repack(dist, repacked)
    names = ", ".join(f"{d.metadata['Name']} {d.version}" for d in dists)
    rows.append(("repacked from the image", "ok", f"{len(dists)} in {time.monotonic() - t:.0f} s"))
    (out / "repacked.txt").write_text(names + "\n")

    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    carried = ROOT / ".slim" / "wheels"
    rc, secs, text = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-compile",
            "--find-links",
            str(carried),
            "--find-links",
            str(repacked),
            "--target",
            str(site),
            f"provetop[{extra}]",
        ],
        dict(os.environ),
        work,
        out / "pip.txt",
        600,
        hide=False,
    )
    rows.append(
        (f"pip install provetop[{extra}] (no index)", "ok" if rc == 0 else "FAIL", f"{secs:.0f} s")
    )
    if rc != 0:
        print(text[-3000:])
        return _table(rows, out)
    sizes = {p.name: _mb(p) for p in site.iterdir() if p.is_dir() and not p.name.endswith("-info")}
    total = _mb(site)
    nvidia = _mb(site / "nvidia") if (site / "nvidia").exists() else 0.0
    top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:6])
    rows.append(("environment size (MB)", "", f"{total:.0f} in all; nvidia/ {nvidia:.0f}; {top}"))
    installed = sorted(p.name for p in site.glob("*.dist-info"))
    (out / "installed.txt").write_text("\n".join(installed) + "\n")
    banned = [
        n
        for n in installed
        if _norm(n).startswith(
            ("nvidia-cublas", "nvidia-cufft", "nvidia-curand", "nvidia-cusolver", "nvidia-cusparse")
        )
    ]
    rows.append(
        (
            "no cuBLAS/cuFFT/cuRAND/cuSOLVER/cuSPARSE installed",
            "ok" if not banned else "FAIL",
            f"{len(installed)} distributions",
        )
    )

    toolkit = _toolkit_files(site)
    if toolkit and os.geteuid() == 0 and shutil.which("unshare"):
        HIDE[:] = toolkit
    (out / "hidden.txt").write_text("\n".join(HIDE) + "\n")
    rows.append(
        (
            "the image's toolkit libraries hidden",
            "ok" if HIDE or not toolkit else "FAIL",
            f"{len(HIDE)} of {len(toolkit)} files (unshare -m; mount --bind /dev/null)",
        )
    )

    home = work / "home"
    (home / "run").mkdir(parents=True)
    os.chmod(home / "run", 0o700)
    env = _clean_env(venv, home)
    py = str(venv / "bin" / "python")
    (out / "env.txt").write_text(
        json.dumps({k: env[k] for k in ("PATH", "LD_LIBRARY_PATH")}, indent=1)
    )

    rc, secs, text = _run(
        [py, "-c", "import provetop, sys; print(provetop.__file__, sys.prefix)"],
        env,
        home,
        out / "where.txt",
        60,
    )
    inside = rc == 0 and str(site) in text
    rows.append(
        (
            "provetop imported from the environment",
            "ok" if inside else "FAIL",
            text.split()[0] if text else "",
        )
    )

    rc, secs, text = _run(
        [py, "-m", "provetop", "selftest", "--backend", "cuda"],
        env,
        home,
        out / "selftest.txt",
        300,
    )
    last = text.strip().splitlines()[-1] if text.strip() else ""
    rows.append(
        ("selftest --backend cuda", "ok" if rc == 0 else "FAIL", f"{secs:.1f} s; {last[:60]}")
    )

    rc, secs, text = _run([py, "-c", PROBE], env, home, out / "probe.txt", 300)
    try:
        probe = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        probe = {"ok": False, "paths": []}
    cuda = {m.group(1): p for p in probe["paths"] if (m := CUDA_LIB.search(p))}
    (out / "libraries.json").write_text(json.dumps(cuda, indent=1))
    unused = [lib for lib in cuda if lib.startswith(UNUSED)]
    outside = [
        f"{lib} ({Path(p).parent})"
        for lib, p in cuda.items()
        if not lib.startswith("libcuda.") and str(site) not in p
    ]
    rows.append(
        (
            "warm-up + selftest in one process",
            "ok" if rc == 0 and probe["ok"] else "FAIL",
            f"{secs:.1f} s",
        )
    )
    rows.append(
        (
            "no cuBLAS/cuFFT/... mapped",
            "ok" if probe["ok"] and not unused else "FAIL",
            ", ".join(unused) or ", ".join(sorted(cuda)),
        )
    )
    rows.append(
        (
            "CUDA libraries from the environment",
            "ok" if probe["ok"] and not outside else "FAIL",
            ", ".join(outside) or "all but the driver's libcuda",
        )
    )

    # the same probe with the image's libraries in view: which object opens which library
    debug = out / "ld-debug"
    _run([py, "-c", PROBE], {**env, "LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(debug)},
         home, out / "probe-visible.txt", 300, hide=False)  # fmt: skip
    opened = []
    for f in sorted(out.glob("ld-debug.*")):
        for line in f.read_text(errors="replace").splitlines():
            if "file=" in line and ("dynamically loaded by" in line or "needed by" in line):
                lib = line.split("file=")[1].split()[0]
                if TOOLKIT_LIB.match(lib):
                    opened.append(" ".join(line.split()[1:]))
        f.unlink()
    (out / "opened-visible.txt").write_text("\n".join(opened) + "\n")
    outside_libs = sorted({o.split("file=")[1].split()[0] for o in opened})
    rows.append(
        (
            "with the image's libraries in view, opened",
            "",
            ", ".join(outside_libs)[:90] or "none",
        )
    )

    rc, secs, text = _run(
        [
            py,
            "-m",
            "provetop",
            "bench",
            "pipeline",
            "--preset",
            "small",
            "--backend",
            "cuda",
            "--proofs",
            "1",
            "--json",
            "--out",
            str(out / "pipeline.json"),
        ],
        env,
        home,
        out / "pipeline.txt",
        300,
    )
    rows.append(("one small proof (bench pipeline)", "ok" if rc == 0 else "FAIL", f"{secs:.1f} s"))

    script = home / "traced.py"
    script.write_text(TRACED)
    rc, secs, text = _run(
        [py, "-m", "provetop", "trace", "--no-record", "--no-listen", "--", py, str(script)],
        env,
        home,
        out / "trace.txt",
        300,
    )
    lib = next(iter(sorted((home / "cache").rglob("libprovetop_inject*.so"))), None)
    linked = ""
    if lib is not None:
        ldd = subprocess.run(["ldd", str(lib)], env=env, capture_output=True, text=True).stdout
        linked = next(
            (
                ln.split("=>")[-1].split("(")[0].strip()
                for ln in ldd.splitlines()
                if "libcupti" in ln
            ),
            "",
        )
        (out / "inject-ldd.txt").write_text(ldd)
    traced_ok = rc == 0 and "sum 268435456" in text
    rows.append(
        ("trace of a CuPy program", "ok" if traced_ok else "FAIL", f"{secs:.1f} s; rc {rc}")
    )
    rows.append(
        (
            "trace library's CUPTI from the environment",
            "ok" if str(site) in linked else "FAIL",
            linked or "no library built",
        )
    )
    return _table(rows, out)


def _table(rows: list[tuple[str, str, str]], out: Path) -> int:
    lines = [f"{name:48} {verdict:5} {detail}" for name, verdict, detail in rows]
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(v == "FAIL" for _, v, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
