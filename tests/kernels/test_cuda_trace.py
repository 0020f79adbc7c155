"""``provetop trace`` on a real GPU: unmodified programs run under the command, their recordings
read back.

Programs: CuPy (MemoryAsyncPool and plain ``cupy.cuda.runtime.malloc``), PyTorch with
``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`` (a plain allocation beside it through the
driver's own cuMemAlloc, as a library linked into the same process would make), and sppark's
MSM where ``PROVETOP_SPPARK_MSM`` names a binary built from its public source (none is in this
repository; the test skips otherwise). Where the phantom occurs: two processes on one card, one
holding a stream-ordered reserve, the other needing it (CUDA releases a pool's reserve
implicitly for its own process only). Each case writes one JSON line to the file named by
``PROVETOP_TRACE_EVIDENCE`` (bench/gpu_trace_accept.sh sets it), so the figures in
docs/trace.md come from these runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provetop.kernels.cuda import inject_build
from provetop.recordings.reader import open_recording
from tests.kernels.test_cuda_inject import GIB, PRELUDE, RESERVE

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
LEFT = 2 * GIB  # what the needer leaves free: less than its ask
ASK = LEFT + RESERVE // 2  # fits only once the other process's reserve is released

POOLS = (
    PRELUDE
    + """
pool = cp.cuda.MemoryAsyncPool()
cp.cuda.set_allocator(pool.malloc)
a = cp.empty(4 * GIB, dtype=cp.uint8)
cp.cuda.Device().synchronize()
time.sleep(0.3)
del a
cp.cuda.Device().synchronize()
p = rt.malloc(1 * GIB)
time.sleep(0.3)
rt.free(p)
sys.exit(5)
"""
)


def cupy_holder(leave_free: int | None = None) -> str:
    """A CuPy process that frees an 8 GiB reserve into its stream-ordered pool, fills the rest
    of the card with plain allocations to ``leave_free`` bytes free when given, says READY and
    holds everything until STOP."""
    fill_line = f"blocks = fill({leave_free})\n" if leave_free is not None else ""
    return (
        PRELUDE
        + f"""
import os
pool = cp.cuda.MemoryAsyncPool()
cp.cuda.set_allocator(pool.malloc)
a = cp.empty({RESERVE}, dtype=cp.uint8)
del a
cp.cuda.Device().synchronize()
{fill_line}open(os.environ["READY"], "w").close()
while not os.path.exists(os.environ["STOP"]):
    time.sleep(0.05)
"""
    )


HOLDER = cupy_holder()
# The holder of the sppark case: the card filled to 1 GiB free beside the reserve, less than
# sppark's MSM takes stream-ordered at 2^24
HOLDER_FILLER = cupy_holder(leave_free=1 * GIB)

TORCH_HOLDER = f"""
import os, time, torch
x = torch.empty({RESERVE}, dtype=torch.uint8, device="cuda")
del x
torch.cuda.synchronize()
open(os.environ["READY"], "w").close()
while not os.path.exists(os.environ["STOP"]):
    time.sleep(0.05)
"""

NEEDER = (
    PRELUDE
    + f"""
import os
while not os.path.exists(os.environ["READY"]):
    time.sleep(0.05)
blocks = fill({LEFT})
time.sleep(0.3)
try:
    p = rt.malloc({ASK})
    rc = 0
    rt.free(p)
except rt.CUDARuntimeError:
    rc = 3
for b in blocks:
    rt.free(b)
open(os.environ["STOP"], "w").close()
sys.exit(rc)
"""
)

TORCH_ALONE = f"""
import ctypes, sys, time, torch
x = torch.empty({4 * GIB}, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(0.3)
del x
torch.cuda.synchronize()
cuda = ctypes.CDLL("libcuda.so.1")
ptr = ctypes.c_uint64(0)
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t({GIB})) == 0
time.sleep(0.3)
cuda.cuMemFree_v2(ptr)
sys.exit(6)
"""


@pytest.fixture(scope="module")
def library(cp: Any) -> Path:
    result = inject_build.build()
    if not result.ok or result.path is None:
        pytest.skip(f"the injection library cannot be built here: {result.reason}")
    return result.path


def trace(library: Path, tmp_path: Path, argv: list[str], *flags: str,
          env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:  # fmt: skip
    """Run ``provetop trace`` on ``argv``; its exit code, the recording's events, stderr."""
    record = tmp_path / f"trace-{len(list(tmp_path.glob('*.pvtrec')))}.pvtrec"
    cmd = [sys.executable, "-m", "provetop", "trace", "--no-listen", "--library", str(library),
           "--record", str(record), "--interval-ms", "20", *flags, "--", *argv]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})  # fmt: skip
    rec = open_recording(record)
    return done.returncode, rec.events, done.stderr


def evidence(**fields: Any) -> None:
    line = json.dumps(fields, sort_keys=True)
    print(line)
    path = os.environ.get("PROVETOP_TRACE_EVIDENCE")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def of(events: list[dict[str, Any]], k: str, **match: Any) -> list[dict[str, Any]]:
    """The events of kind ``k`` whose fields match (``kind="oom"`` is a fault's own field)."""
    return [e for e in events if e["k"] == k and all(e.get(f) == v for f, v in match.items())]


def sppark_binary() -> str:
    """The sppark MSM driver named by ``PROVETOP_SPPARK_MSM``: built on the GPU machine from
    sppark's public source (never part of this repository), called as ``BINARY LOG2N REPS``:
    sppark's ``mult_pippenger`` REPS times on 2^LOG2N host points and scalars."""
    binary = os.environ.get("PROVETOP_SPPARK_MSM")
    if not binary or not shutil.which(binary):
        pytest.skip(
            "PROVETOP_SPPARK_MSM names no sppark MSM binary (built from sppark's "
            "public source on the GPU machine; none is in this repository)"
        )
    return binary


def peak(events: list[dict[str, Any]], field: str) -> int:
    return max((int(e[field]) for e in of(events, "memory")), default=0)


@pytest.mark.gpu
def test_a_cupy_program_its_pools_and_its_exit_code(library: Path, tmp_path: Path) -> None:
    rc, events, err = trace(library, tmp_path, [sys.executable, "-c", POOLS])
    assert rc == 5, err
    hello = events[0]
    assert hello["config"]["adapter"] == "trace" and hello["devices"]
    assert peak(events, "async_reserved") >= 4 * GIB  # the pool, over time
    assert peak(events, "sync_used") >= 1 * GIB  # the plain cudaMalloc beside it
    assert any(e.get("nvml_used") for e in of(events, "memory"))  # the nvidia-smi view
    assert of(events, "gpu")
    plain = [e for e in of(events, "alloc") if e["pool"] == "sync" and e["requested"] == GIB]
    assert plain
    evidence(
        case="cupy-pools",
        rc=rc,
        async_reserved_peak=peak(events, "async_reserved"),
        sync_used_peak=peak(events, "sync_used"),
        memory_events=len(of(events, "memory")),
    )


@pytest.mark.gpu
def test_pytorch_with_the_stream_ordered_backend(library: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    rc, events, err = trace(
        library,
        tmp_path,
        [sys.executable, "-c", TORCH_ALONE],
        env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    )
    assert rc == 6, err
    assert peak(events, "async_reserved") >= 4 * GIB
    assert peak(events, "sync_used") >= GIB
    evidence(
        case="torch-alone",
        rc=rc,
        async_reserved_peak=peak(events, "async_reserved"),
        sync_used_peak=peak(events, "sync_used"),
        threshold=max(
            (
                p["release_threshold"]
                for e in of(events, "memory")
                for p in e.get("async_pools", [])
            ),
            default=0,
        ),
    )


def two(tmp_path: Path, holder: str) -> list[str]:
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    for f in (ready, stop):
        f.unlink(missing_ok=True)
    (tmp_path / "holder.py").write_text(holder)
    (tmp_path / "needer.py").write_text(NEEDER)
    py = sys.executable
    script = (f"export READY={ready} STOP={stop}; {py} {tmp_path}/holder.py & "
              f"{py} {tmp_path}/needer.py; rc=$?; touch {stop}; wait; exit $rc")  # fmt: skip
    return ["sh", "-c", script]


@pytest.mark.gpu
@pytest.mark.parametrize("holder", ["cupy", "torch"])
def test_two_processes_the_phantom_and_the_cure(library: Path, tmp_path: Path,
                                                holder: str) -> None:  # fmt: skip
    env = {}
    source = HOLDER
    if holder == "torch":
        pytest.importorskip("torch")
        source = TORCH_HOLDER
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    rc, events, err = trace(library, tmp_path, two(tmp_path, source), env=env)
    ooms = of(events, "fault", kind="oom")
    assert rc == 3, err  # refused: the other process's reserve was the phantom
    assert ooms and ooms[0]["case"] == "phantom" and ooms[0].get("peers_unused"), ooms
    held = sum(ooms[0]["peers_unused"].values())
    assert held >= RESERVE // 2
    rc_heal, healed, err = trace(library, tmp_path, two(tmp_path, source), "--heal", env=env)
    assert rc_heal == 0, err
    assert not of(healed, "fault", kind="oom")
    asked = of(healed, "alloc", site="heal", decision="trim")
    trims = of(healed, "alloc", site="trim")
    assert asked and trims and trims[0]["reclaimed"] >= RESERVE // 2
    evidence(
        case=f"two-processes-{holder}",
        rc_plain=rc,
        oom_message=ooms[0]["message"],
        peers_unused=held,
        rc_heal=rc_heal,
        heal_reason=asked[0]["reason"],
        reclaimed=trims[0]["reclaimed"],
        trim_ms=trims[0]["took_ns"] / 1e6,
    )


@pytest.mark.gpu
def test_a_killed_program_leaves_a_readable_recording(library: Path, tmp_path: Path) -> None:
    script = PRELUDE + "import os, signal\nx = cp.ones(1 << 20)\ntime.sleep(0.3)\n" \
        "os.kill(os.getpid(), signal.SIGKILL)\n"  # fmt: skip
    rc, events, err = trace(library, tmp_path, [sys.executable, "-c", script])
    assert rc == 128 + 9, err
    assert of(events, "memory")
    assert any("without its exit record" in e["message"] for e in of(events, "fault"))
    assert events[-1]["k"] == "engine_state" and events[-1]["state"] == "done"


@pytest.mark.gpu
def test_sppark_msm(library: Path, tmp_path: Path) -> None:
    """sppark's MSM (msm/pippenger.cuh) takes all its device memory stream-ordered: its
    buckets through gpu_t's Dmalloc, its points, scalars and digits through a dev_ptr_t made
    with a stream (cudaMallocAsync both); a plain dev_ptr_t (cudaMalloc) is what a prover
    built on it adds around it. Every one of its allocations is a record of the trace."""
    binary = sppark_binary()
    rc, events, err = trace(library, tmp_path, [binary, "22", "3"])
    assert rc == 0, err
    # its buckets and its scratch, per MSM: above the 64 MiB floor of an alloc event at 2^22
    scratch = [e for e in of(events, "alloc") if e["pool"] == "async" and e["requested"] > 0]
    assert len(scratch) >= 3, "no stream-ordered allocation seen"
    assert peak(events, "async_used") > 0
    plain_peak = peak(events, "sync_used")
    evidence(
        case="sppark-msm-2^22",
        rc=rc,
        async_allocations=len(scratch),
        async_largest=max(e["requested"] for e in scratch),
        async_reserved_peak=peak(events, "async_reserved"),
        sync_used_peak=plain_peak,
        threshold=max(
            (
                p["release_threshold"]
                for e in of(events, "memory")
                for p in e.get("async_pools", [])
            ),
            default=0,
        ),
    )


@pytest.mark.gpu
def test_sppark_msm_beside_another_process_reserve(library: Path, tmp_path: Path) -> None:
    """sppark's MSM needs stream-ordered memory its pool cannot grow into while another
    process's reserve holds the card: refused without --heal, done with it (the heal before a
    stream-ordered allocation asks the other process to trim)."""
    binary = sppark_binary()
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    (tmp_path / "holder.py").write_text(HOLDER_FILLER)
    script = (f"export READY={ready} STOP={stop}; rm -f $READY $STOP; "
              f"{sys.executable} {tmp_path}/holder.py & "
              f"until [ -e $READY ]; do sleep 0.05; done; {binary} 24 1; rc=$?; "
              "touch $STOP; wait; exit $rc")  # fmt: skip
    rc, events, err = trace(library, tmp_path, ["sh", "-c", script])
    ooms = of(events, "fault", kind="oom")
    assert rc != 0 and ooms, err
    rc_heal, healed, err = trace(library, tmp_path, ["sh", "-c", script], "--heal")
    assert rc_heal == 0, err
    assert not of(healed, "fault", kind="oom")
    trims = of(healed, "alloc", site="trim")
    assert trims
    evidence(
        case="sppark-beside-reserve",
        rc_plain=rc,
        oom_message=ooms[0]["message"],
        oom_case=ooms[0].get("case"),
        rc_heal=rc_heal,
        reclaimed=trims[0]["reclaimed"],
        trim_ms=trims[0]["took_ns"] / 1e6,
    )
