"""cuzk's pre-stage lines read as cuzk means them: outcomes of the GPU call that prints them.

The logs here are built from cuzk's own format strings (``docs/cuzk.md``: ``groth16_cuda.cu``'s
``CUZK_TIMING`` fprintf lines, ``engine.rs``'s ``TIMELINE`` eprintln), in every order the
pre-stage lines can take inside a call and between two workers' calls, cut mid-line, and as the
seed's run: ten partitions of which nine fall back, each ending with its ``GPU_END``.
"""

from __future__ import annotations

import json

import pytest

from provetop.cli import main
from provetop.recordings.state import State
from provetop.sources.cuzk.convert import Converter

JOB = "5f1c2a9e-0b7d-4e43-9a6e-2d1c0f3b8a71"

# cuzk's formats, with the values filled in by the helpers below
TIMELINE = "TIMELINE,{ms},{event},{job},{detail}"
SPLIT = "CUZK_TIMING: split_vectors_ms={split} setup_to_split_ms={setup}"
VRAM = (
    "CUZK_TIMING: prestage_vram free_mib={free} usable_mib={usable} need_da_mib=4096 "
    "need_dbc_mib=8192 total_mib=12288"
)
SETUP_OK = "CUZK_TIMING: prestage_setup=ok domain=134217728 lot_of_memory=1"
SKIP_VRAM = "CUZK_TIMING: prestage_setup=skip_vram"
SETUP_FALLBACK = "CUZK_TIMING: prestage_setup=fallback err={err}"
HOST_REGISTER = "CUZK_TIMING: host_register=fallback err={err}"
NTT = "CUZK_TIMING: gpu_tid=0 ntt_msm_h_ms={ms}"
BATCH = "CUZK_TIMING: gpu_tid=0 batch_add_ms={ms}"
TAIL = "CUZK_TIMING: gpu_tid=0 tail_msm_ms={ms} gpu_total_ms={total}"

LINES = {
    "vram": VRAM.format(free=14034, usable=13522),
    "vram_low": VRAM.format(free=9000, usable=8488),
    "ok": SETUP_OK,
    "skip_vram": SKIP_VRAM,
    "fallback": SETUP_FALLBACK.format(err=2),
    "fallback_712": SETUP_FALLBACK.format(err=712),
    "host_register": HOST_REGISTER.format(err=712),
}

# each order of pre-stage lines one call can print, and what the call's pre-stage was
ORDERS = [
    (("vram", "ok"), "ok"),
    (("ok",), "ok"),
    (("vram_low", "skip_vram"), "skip"),
    (("skip_vram",), "skip"),
    (("vram", "fallback"), "fallback"),
    (("fallback",), "fallback"),
    (("fallback_712",), "fallback"),
    (("vram",), "fallback"),  # cudaMalloc failed: no setup line at all
    (("host_register",), "fallback"),
    (("host_register", "fallback"), "fallback"),
    (("skip_vram", "fallback"), "fallback"),
    (("vram_low", "skip_vram", "fallback"), "fallback"),
    (("host_register", "skip_vram"), "fallback"),
]


def tl(ms: int, event: str, detail: str, job: str = JOB) -> str:
    return TIMELINE.format(ms=ms, event=event, job=job, detail=detail)


def call_lines(
    p: int, worker: int, start: int, gpu_ms: int, prestage: tuple[str, ...], *,
    region: bool, split_first: bool = True,
) -> tuple[list[str], list[str], list[str]]:  # fmt: skip
    """(lines up to the pre-stage outcome, the GPU region's lines, the end) of one call."""
    head = [
        tl(start - 1, "GPU_PICKUP", f"worker={worker},partition={p}"),
        tl(start, "GPU_START", f"worker={worker},partition={p}"),
    ]
    outcome = [LINES[k] for k in prestage]
    split = [SPLIT.format(split=0, setup=1)]
    head += split + outcome if split_first else outcome + split
    body = []
    if region:
        body = [NTT.format(ms=700), BATCH.format(ms=300), TAIL.format(ms=500, total=1500)]
    end = [tl(start + gpu_ms, "GPU_END", f"worker={worker},partition={p},gpu_ms={gpu_ms}")]
    return head, body, end


def run_log(calls: list[tuple[list[str], list[str], list[str]]], overlap: bool) -> list[str]:
    """Sequential calls, or (``overlap``) each call's start and pre-stage printed while the
    previous call still runs its region: two workers sharing one GPU."""
    lines = [tl(0, "SYNTH_START", f"partition={p}") for p in range(len(calls))]
    lines += [tl(5, "SYNTH_END", f"partition={p},synth_ms=5") for p in range(len(calls))]
    pending: list[str] = []
    for head, body, end in calls:
        lines += head
        if overlap:
            lines += pending
        lines += body
        if overlap:
            pending = end
        else:
            lines += end
    return lines + pending


def convert(lines: list[str], cut_last: bool = False) -> tuple[list[dict], State]:
    conv = Converter(workers_per_device=2)
    events: list[dict] = []
    for i, line in enumerate(lines):
        events += conv.feed_line(line, truncated=cut_last and i == len(lines) - 1)
    events += conv.flush()
    last = 0
    for e in events:  # times never go backwards
        assert e["t"] >= last
        last = e["t"]
    return events, State().fold(events)


@pytest.mark.parametrize("overlap", [False, True], ids=["one worker", "two workers"])
@pytest.mark.parametrize("split_first", [True, False], ids=["split first", "outcome first"])
@pytest.mark.parametrize("region", [True, False], ids=["region lines", "no region lines"])
@pytest.mark.parametrize("order, status", ORDERS, ids=["+".join(o) for o, _ in ORDERS])
def test_every_order_of_pre_stage_lines_is_one_outcome_of_one_call(
    order, status, region, split_first, overlap
):
    first = (("vram", "ok"), "ok")  # a neighbour before and after, pre-staged normally
    plan = [first, (order, status), first, (order, status)]
    calls, start = [], 100
    gpu = {}
    for p, (lines, _) in enumerate(plan):
        gpu[p] = 1580 + p
        calls.append(
            call_lines(p, p % 2, start, gpu[p], lines, region=region, split_first=split_first)
        )
        start += 1600 if not overlap else 1000
    events, state = convert(run_log(calls, overlap))
    done = [e for e in events if e["k"] == "partition_done"]
    assert sorted(e["partition"] for e in done) == [0, 1, 2, 3]
    assert all(e["ok"] and e["attempt"] == 0 for e in done)
    assert len(state.attempts) == 4 and len(state.partitions) == 4
    assert all(r.ok and r.attempt == 0 for r in state.partitions.values()), "a phantom attempt"
    for e in done:
        assert e["prestage"] == plan[e["partition"]][1], (e["partition"], e.get("prestage_reason"))
        if not region:
            assert e["gpu_total_ms"] == gpu[e["partition"]]
        else:
            assert e["gpu_total_ms"] == 1500
    totals = state.totals()
    fallbacks = sum(1 for _, s in plan if s == "fallback")
    assert totals["fallbacks"] == fallbacks and totals["retries"] == 0


def seed_run() -> tuple[list[str], dict[int, int]]:
    """The seed's run in cuzk's formats: two workers on one GPU, a proof of ten partitions;
    partition 0 pre-stages (gpu_total_ms 1588, GPU_END 1590 ms), the nine others print
    ``prestage_setup=fallback err=2`` inside their GPU call and end with their GPU_END."""
    lines = [
        "2026-11-18T11:06:40.004000Z  INFO cuzk_core::engine: dispatching per-partition "
        f"synthesis (budget-gated) job_id={JOB} num_partitions=10 budget_available_gib=200"
    ]
    gpu_ms = {p: 1590 if p == 0 else 2400 + 37 * p for p in range(10)}
    calls = []
    start = 1000
    for p in range(10):
        prestage = ("vram", "ok") if p == 0 else ("vram", "fallback")
        head, body, end = call_lines(p, p % 2, start, gpu_ms[p], prestage, region=p == 0)
        if p == 0:
            body = [NTT.format(ms=690), BATCH.format(ms=310), TAIL.format(ms=520, total=1588)]
        calls.append((head, body, end))
        start += gpu_ms[p] + 3
    return lines + run_log(calls, overlap=False), gpu_ms


def test_the_seeds_run_is_ten_done_and_nine_fallbacks_with_each_gpu_ms(tmp_path, capsys):
    lines, gpu_ms = seed_run()
    log = tmp_path / "cuzk.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "seed.pvtrec"
    assert main(["import-cuzk", str(log), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["summary", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    totals = summary["totals"]
    assert totals["partitions_ok"] == 10 and totals["partitions_failed"] == 0
    assert totals["unfinished"] == 0 and totals["retries"] == 0
    assert totals["fallbacks"] == 9 and totals["prestage_ok"] == 1
    assert totals["proofs_done"] == 1
    rows = {r["partition"]: r for r in summary["attempts"]}
    assert len(summary["attempts"]) == 10
    assert rows[0]["gpu_total_ms"] == 1588  # the GPU region cuzk logged
    for p in range(1, 10):
        assert rows[p]["prestage"] == "fallback"
        assert rows[p]["gpu_total_ms"] == gpu_ms[p], p  # exactly the GPU_END's gpu_ms
        assert "cudaErrorMemoryAllocation" in rows[p]["prestage_reason"]


@pytest.mark.parametrize("keep", [0, 5, 11, 30, 52, -9, -1])
def test_a_log_cut_mid_line_never_invents_a_number(keep, tmp_path, capsys):
    lines, gpu_ms = seed_run()
    last = lines[-1]  # partition 9's GPU_END
    cut = last[:keep] if keep >= 0 else last[:keep]
    events, state = convert(lines[:-1] + [cut], cut_last=True)
    done = {e["partition"]: e for e in events if e["k"] == "partition_done"}
    for p in range(9):
        assert done[p]["ok"] and done[p]["gpu_total_ms"] == (1588 if p == 0 else gpu_ms[p])
    assert 9 not in done or done[9]["gpu_total_ms"] != int(cut.rpartition("=")[2] or -1)
    # the same through import-cuzk: a file whose last line has no newline
    log = tmp_path / "cut.log"
    log.write_text("\n".join(lines[:-1] + [cut]))
    out = tmp_path / "cut.pvtrec"
    assert main(["import-cuzk", str(log), "-o", str(out)]) == 0
    assert "truncated" in capsys.readouterr().err or not cut


def test_a_pre_stage_line_cut_mid_line_is_not_an_outcome():
    head, body, end = call_lines(0, 0, 100, 1580, ("vram", "fallback"), region=False)
    cut = head[-1][: len("CUZK_TIMING: prestage_setup=fall")]
    events, state = convert(head[:-1] + [cut], cut_last=True)
    assert not [e for e in events if e["k"] == "alloc" and e.get("decision") == "fallback"]
