"""Build the injection library of ``provetop trace`` (``src/inject/``) with this machine's tools.

Why built here and not shipped: the library links CUPTI, whose library must match the CUPTI
headers it was compiled against and must load beside the driver of the machine it runs on; the
CUDA extras (the ``nvidia-cuda-cupti`` wheel) bring headers and library together, so the pair
found here is the pair used. The library does not link libcuda: it takes the driver's entry
points from the process it is injected into (``src/inject/driver.h``).

Where things are looked for, in order:

- CUPTI (``cupti.h`` and ``libcupti.so*`` together): ``PROVETOP_CUPTI`` (a folder holding both,
  or ``include/`` and ``lib/``/``lib64/`` under it), the installed ``nvidia-cuda-cupti*``
  wheels (their file lists, so any layout of theirs is found), then the CUDA toolkit
  (``include/`` and ``lib64/``, or ``extras/CUPTI/``);
- ``cuda.h``: the CUDA wheels that ship it, then the toolkit (``CUDA_HOME``, ``CUDA_PATH``,
  the folder above ``nvcc``, ``/usr/local/cuda``);
- the compiler: ``CXX``, ``g++``, ``c++``, ``clang++``, then ``nvcc`` (which drives a host
  compiler itself).

Each (CUPTI, ``cuda.h``) pair is tried until one compiles: a wheel's CUPTI headers newer than
the toolkit's ``cuda.h`` may not compile against it, and the next pair then serves. The result
goes to a cache folder under a name that carries a hash of the sources and the pair, so a stale
library is never picked up; it is written under a temporary name and renamed.

``python -m provetop.kernels.cuda.inject_build`` prints the library's path, or one line saying why
it
cannot be built, and exits 2 then.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from provetop.kernels.tuning import KernelTuning

SRC_DIR = Path(__file__).resolve().parent / "src"
INJECT_DIR = SRC_DIR / "inject"
MAIN_SOURCE = INJECT_DIR / "inject.cpp"
EXPORTS = INJECT_DIR / "inject.map"
LIB_STEM = "libprovetop_inject"
# Wheels that may hold CUPTI or cuda.h, by distribution name (CUDA 13's and CUDA 12's names).
CUPTI_WHEELS = ("nvidia-cuda-cupti", "nvidia-cuda-cupti-cu13", "nvidia-cuda-cupti-cu12")
CUDA_H_WHEELS = (
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu13",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-nvcc-cu13",
    "nvidia-cuda-nvcc-cu12",
    "cuda-toolkit",
)
# The flags every build uses; the version script exports InitializeInjection alone.
CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra")
# Tried first: the library is loaded into programs that may carry an older libstdc++ of their
# own (conda environments, bundled binaries), so it brings its C++ runtime along; where the
# static runtime is not installed, the build links the shared one instead.
STATIC_RUNTIME = ("-static-libstdc++", "-static-libgcc")
COMPILE_TIMEOUT_S = 180  # one compile takes ~2 s on a 2-core machine; a hung one is stopped


@dataclass(frozen=True)
class Cupti:
    """Where one CUPTI's headers and library are, and where they came from (for the report)."""

    include: Path
    library: Path
    origin: str


@dataclass
class BuildResult:
    """The library's path, or the one-line reason there is none (``log`` has the details)."""

    path: Path | None = None
    reason: str | None = None
    cupti: Cupti | None = None
    cuda_include: Path | None = None
    compiler: str | None = None
    cached: bool = False
    log: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.path is not None


def cache_dir() -> Path:
    """Where built libraries go: ``PROVETOP_INJECT_DIR``, else the user's cache (the package's
    own folder may be read-only once installed)."""
    configured = KernelTuning.from_env().inject_dir
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "provetop" / "inject"


def _wheel_files(dist: str) -> list[Path]:
    try:
        files = importlib.metadata.files(dist) or []
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return []
    return [Path(str(d.locate_file(f))) for f in files]


def _libcupti_in(folder: Path) -> Path | None:
    """The versioned libcupti in ``folder`` (``libcupti.so.13`` before ``libcupti.so``: the
    soname is what the built library will ask the loader for)."""
    if not folder.is_dir():
        return None
    found = sorted(folder.glob("libcupti.so*"), key=lambda p: (p.name == "libcupti.so", p.name))
    return found[0] if found else None


def _toolkit_roots() -> list[Path]:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots.append("/usr/local/cuda")
    out: list[Path] = []
    for r in roots:
        if r and Path(r).is_dir() and Path(r).resolve() not in out:
            out.append(Path(r).resolve())
    return out


def find_cupti() -> list[Cupti]:
    """Every CUPTI found, in the order they are tried (module docstring)."""
    out: list[Cupti] = []
    env = KernelTuning.from_env().cupti_dir
    if env:
        root = Path(env)
        for inc, lib in (
            (root, root),
            (root / "include", root / "lib"),
            (root / "include", root / "lib64"),
        ):
            library = _libcupti_in(lib)
            if (inc / "cupti.h").is_file() and library:
                out.append(Cupti(inc, library, f"PROVETOP_CUPTI={env}"))
                break
    for dist in CUPTI_WHEELS:
        files = _wheel_files(dist)
        headers = [f for f in files if f.name == "cupti.h"]
        libs = sorted(
            (f for f in files if f.name.startswith("libcupti.so")),
            key=lambda p: (p.name == "libcupti.so", p.name),
        )
        if headers and libs and headers[0].is_file() and libs[0].is_file():
            version = importlib.metadata.version(dist)
            out.append(Cupti(headers[0].parent, libs[0], f"{dist} {version}"))
    for root in _toolkit_roots():
        for inc, lib in (
            (root / "include", root / "lib64"),
            (root / "extras" / "CUPTI" / "include", root / "extras" / "CUPTI" / "lib64"),
            (
                root / "targets" / "x86_64-linux" / "include",
                root / "targets" / "x86_64-linux" / "lib",
            ),
        ):
            library = _libcupti_in(lib)
            if (inc / "cupti.h").is_file() and library:
                out.append(Cupti(inc, library, f"CUDA toolkit {root}"))
                break
    unique: list[Cupti] = []
    for c in out:
        if all(c.library.resolve() != u.library.resolve() for u in unique):
            unique.append(c)
    return unique


def find_cuda_headers() -> list[Path]:
    """Folders holding ``cuda.h``: the CUDA wheels first, then the toolkit's."""
    out: list[Path] = []
    for dist in CUDA_H_WHEELS:
        out += [f.parent for f in _wheel_files(dist) if f.name == "cuda.h" and f.is_file()]
    for root in _toolkit_roots():
        for inc in (root / "include", root / "targets" / "x86_64-linux" / "include"):
            if (inc / "cuda.h").is_file():
                out.append(inc)
    unique: list[Path] = []
    for p in out:
        if p.resolve() not in unique:
            unique.append(p.resolve())
    return unique


def find_compiler() -> str | None:
    """The C++ compiler to build with (module docstring), or None."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++", "nvcc"):
        if name and (path := shutil.which(name)):
            return path
    return None


def sources() -> list[Path]:
    """The files the library is built from (its hash covers all of them)."""
    return sorted(p for p in INJECT_DIR.iterdir() if p.suffix in (".cpp", ".h", ".map"))


def build_key(compiler: str, cupti: Cupti, cuda_include: Path) -> str:
    """16 hex digits naming one build: the sources, the compiler and the headers/library."""
    h = hashlib.sha256()
    for p in sources():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    for part in (compiler, cupti.include, cupti.library.resolve(), cuda_include, *CXX_FLAGS):
        h.update(str(part).encode() + b"\0")
    return h.hexdigest()[:16]


def command(
    compiler: str, cupti: Cupti, cuda_include: Path, out: Path, static: bool = True
) -> list[str]:
    """The compile-and-link command line. libcupti is linked by its file name (the built
    library then asks for its soname) with an rpath to its folder, so the driver's dlopen of
    the library finds it without LD_LIBRARY_PATH."""
    includes = [f"-I{SRC_DIR}", f"-I{cupti.include}", f"-I{cuda_include}"]
    rpath, exports = str(cupti.library.parent), str(EXPORTS)
    libs = [f"-L{rpath}", f"-l:{cupti.library.name}", "-ldl", "-lpthread"]
    flags = [*CXX_FLAGS, *(STATIC_RUNTIME if static else ())]
    if Path(compiler).name == "nvcc":  # host flags through -Xcompiler, ld's through -Xlinker
        host = [f for f in flags if f not in ("-std=c++17", "-O2", "-shared")]
        return [
            compiler, "-std=c++17", "-O2", "-shared", f"-Xcompiler={','.join(host)}", *includes,
            str(MAIN_SOURCE), "-o", str(out), f"-Xlinker=-rpath={rpath}",
            f"-Xlinker=--version-script={exports}", *libs,
        ]  # fmt: skip
    link = [f"-Wl,-rpath,{rpath}", f"-Wl,--version-script={exports}", "-pthread", *libs]
    return [compiler, *flags, *includes, str(MAIN_SOURCE), "-o", str(out), *link]


def build(folder: Path | None = None, force: bool = False) -> BuildResult:
    """Build (or find already built) the library; never raises for a missing tool or a failed
    compile: the result says why."""
    result = BuildResult()
    compiler = find_compiler()
    if compiler is None:
        result.reason = "no C++ compiler (g++, c++, clang++ or nvcc) on PATH"
        return result
    result.compiler = compiler
    cuptis = find_cupti()
    if not cuptis:
        result.reason = (
            "CUPTI not found: install the CUDA extras (pip install nvidia-cuda-cupti) or a CUDA "
            "toolkit, or set PROVETOP_CUPTI to a folder with cupti.h and libcupti.so"
        )
        return result
    headers = find_cuda_headers()
    if not headers:
        result.reason = "cuda.h not found: install a CUDA toolkit or set CUDA_HOME"
        return result
    folder = folder or cache_dir()
    for cupti in cuptis:
        for cuda_include in headers:
            out = folder / f"{LIB_STEM}-{build_key(compiler, cupti, cuda_include)}.so"
            if out.is_file() and not force:
                result.path, result.cupti, result.cuda_include = out, cupti, cuda_include
                result.cached = True
                return result
            error = _compile(compiler, cupti, cuda_include, out, static=True)
            if error is not None:
                error = _compile(compiler, cupti, cuda_include, out, static=False)
            if error is None:
                result.path, result.cupti, result.cuda_include = out, cupti, cuda_include
                return result
            result.log.append(f"{cupti.origin} with {cuda_include}/cuda.h: {error}")
    first = result.log[0].splitlines()[0] if result.log else "no build tried"
    result.reason = f"the injection library did not compile ({len(result.log)} tries): {first}"
    return result


def _compile(
    compiler: str, cupti: Cupti, cuda_include: Path, out: Path, static: bool
) -> str | None:
    """Compile into ``out`` (a temporary name, then renamed); None, or the compiler's output."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        try:
            done = subprocess.run(
                command(compiler, cupti, cuda_include, Path(tmp), static),
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        if done.returncode != 0:
            return (done.stderr or done.stdout or f"exit status {done.returncode}").strip()
        os.replace(tmp, out)
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    """Print the library's path (exit 0) or why there is none (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m provetop.kernels.cuda.inject_build",
        description="Build the injection library of `provetop trace`; print its path.",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="cache folder (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if it is cached")
    parser.add_argument("-v", "--verbose", action="store_true", help="say what was used")
    args = parser.parse_args(argv)
    result = build(args.dir, force=args.force)
    if not result.ok:
        print(f"inject_build: {result.reason}", file=sys.stderr)
        if args.verbose:
            for line in result.log:
                print(line, file=sys.stderr)
        return 2
    if args.verbose:
        how = "cached" if result.cached else "built"
        assert result.cupti is not None
        print(
            f"inject_build: {how} with {result.compiler}, CUPTI from {result.cupti.origin} "
            f"({result.cupti.library}), cuda.h from {result.cuda_include}",
            file=sys.stderr,
        )
    print(result.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
