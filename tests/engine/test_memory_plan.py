"""Memory plans (engine/memory/plan.py): the choice by device memory, the start-up refusal, and
complete runs on modeled devices too small for a, b, c at once.

Why: a card of 8 or 12 GiB lost every partition of a 32 GiB sector (the fallback still put
a, b, c on the device). The choice is pure arithmetic, checked at porep-32g sizes with the CUDA
footprint; the runs use the cpu backend on a modeled device whose capacity is computed from
the partition's own footprint, so each plan is the only one that fits.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from provetop.cli import main
from provetop.engine.memory.allocator import footprint
from provetop.engine.memory.plan import (
    OPERAND_BYTES,
    MemoryPlan,
    PlanError,
    choose_plan,
    minimum_capacity,
    plan_need,
    smallest_need,
)
from provetop.engine.memory.stream_plan import (
    aux_scalar_bytes,
    cuda_footprint,
    plan_with_window,
    window_floor,
)
from provetop.engine.run.runner import Engine, EngineError
from provetop.engine.settings.config import from_preset
from provetop.engine.spec.workload import query_sizes
from provetop.kernels.cuda.msm_plan import stream_window_bits
from provetop.kernels.cuda.ntt_plan import twiddle_bytes
from provetop.kernels.tuning import DEFAULT_TUNING
from tests.engine.run_helper import run_engine

GiB = 1 << 30


def porep_cuda_footprint(host_chunk: int = 1 << 22):
    """porep-32g's CUDA footprint with every query streamed (as on a card of 8 to 24 GiB), the
    streamed MSMs at the floor's window (the smallest bucket arrays)."""
    sizes = query_sizes(27)
    base = footprint(27, sizes)
    streamed = {q: host_chunk for q in sizes.as_dict()}
    fp = cuda_footprint(
        base, sizes.as_dict(), streamed, DEFAULT_TUNING, window_floor(streamed, DEFAULT_TUNING)
    )
    return fp, aux_scalar_bytes(sizes), twiddle_bytes(27)


@pytest.mark.parametrize(
    "free_gib, slots, z_with_h, release",
    [
        (15.2, 3, True, False),  # a 16 GiB card: a, b, c fit (the pre-stage or fallback path)
        (11.0, 2, True, False),  # 12 GiB: two slots, z beside H
        (9.5, 2, True, True),  # two slots; the twiddle table makes room for z beside H
        (8.3, 1, True, True),  # too little for two slots: one, z still beside H
        (5.5, 1, False, True),  # an 8 GiB card once the context and the table are counted:
        # z goes up only after H's memory is given back
    ],
)
def test_the_fastest_plan_that_fits_is_chosen(free_gib, slots, z_with_h, release):
    fp, z, tables = porep_cuda_footprint()
    plan = choose_plan(int(free_gib * GiB), fp, z, tables)
    assert (plan.slots, plan.z_with_h, plan.release_tables) == (slots, z_with_h, release)
    assert plan.need <= plan.free and plan.streamed == (slots < 3)
    assert plan.name in plan.reason


# Streamed queries with a reader of the aux scalars on the device, and free GiB where a plan
# fits: B-G1's points there (as on a 40 GiB card; in turn up to 13 GiB, where the plan has no
# room for the pass, one pass from 13.35), or H's (the residency places the largest first;
# without H streamed, no pass).
NO_HOST_Z = [(("h", "l", "a"), f) for f in (8.3, 9.5, 11.0, 13.0, 13.35, 15.2, 17.0, 20.0, 40.0)]
NO_HOST_Z += [(("l", "a", "b_g1"), f) for f in (40.0, 60.0)]


@pytest.mark.parametrize("queries, free_gib", NO_HOST_Z)
def test_the_streamed_msms_never_slow_the_plan(queries, free_gib):
    """How the streamed MSMs run is chosen only among variants whose plan is as fast as the
    floor's window run one query at a time; more memory never gives a smaller cap in the same
    mode; one interleaved pass only with H in it and beside H's aux scalars, with its bytes in
    the footprint; and where the cap stops short of what the rule wants, one more bit would
    slow the plan. With the aux scalars on the device, as where a reader of them has its points
    there (a pass reading them from host memory needs less, so its plan may be faster than the
    floor's: the test below); without H among the streamed queries, no pass."""
    tuning = DEFAULT_TUNING
    sizes = query_sizes(27)
    base = footprint(27, sizes)
    streamed = {q: 1 << 22 for q in queries}
    z, tables = aux_scalar_bytes(sizes), twiddle_bytes(27)
    free = int(free_gib * GiB)
    chosen = plan_with_window(free, base, sizes.as_dict(), streamed, tuning, z, tables)
    fp, plan, cap = chosen.footprint, chosen.plan, chosen.window_max
    floor = window_floor(streamed, tuning)
    at_floor = choose_plan(
        free, cuda_footprint(base, sizes.as_dict(), streamed, tuning, floor), z, tables
    )

    def rank(p):
        return (p.slots, p.z_with_h, not p.release_tables)

    assert rank(plan) == rank(at_floor)
    each = sizes.as_dict()
    top = max(stream_window_bits(each[q], None, -(-each[q] // (1 << 22))) for q in queries)
    assert plan.need <= free and floor <= cap <= top
    assert (fp.together > 0) == chosen.together
    assert not chosen.host_scalars  # a reader of z is not streamed
    if chosen.together:
        assert "h" in streamed and plan.z_with_h
    else:  # with the same cap, one pass would have slowed the plan (or no H, or no room)
        if "h" in streamed and at_floor.z_with_h:
            for c in range(floor, top + 1):
                fp_t = cuda_footprint(base, sizes.as_dict(), streamed, tuning, c, True)
                try:
                    assert rank(choose_plan(free, fp_t, z, tables)) < rank(at_floor)
                except PlanError:
                    pass
        more = plan_with_window(free + 4 * GiB, base, sizes.as_dict(), streamed, tuning, z, tables)
        assert more.together or more.window_max >= cap
    if cap < top:  # one more bit would have slowed the plan, or not fitted at all
        up = cuda_footprint(base, sizes.as_dict(), streamed, tuning, cap + 1, chosen.together)
        try:
            assert rank(choose_plan(free, up, z, tables)) < rank(plan)
        except PlanError:
            pass


def test_a_16gib_card_runs_the_streamed_msms_in_one_pass_and_an_8gib_one_too_with_z_on_host():
    """The H200's free bytes under --device-memory 16GiB and 8GiB (from the plans recorded on
    2026-12-02): both run the four streamed MSMs in one pass, the pass reading the aux scalars
    from host memory."""
    sizes = query_sizes(27)
    base = footprint(27, sizes)
    streamed = {q: 1 << 22 for q in sizes.as_dict()}
    z, tables = aux_scalar_bytes(sizes), twiddle_bytes(27)
    args = (base, sizes.as_dict(), streamed, DEFAULT_TUNING, z, tables)
    at16 = plan_with_window(int(13.35 * GiB), *args)
    assert at16.together and at16.host_scalars
    assert at16.plan.slots == 3 and at16.window_max >= 19
    at8 = plan_with_window(int(5.35 * GiB), *args)
    assert at8.together and at8.host_scalars and at8.plan.z_with_h


@pytest.mark.parametrize("free_gib", [5.5, 8.3, 11.0, 13.35, 17.0, 40.0])
def test_a_larger_chunk_only_where_the_plan_stays_as_fast(free_gib):
    """plan_streaming keeps the configured chunk's plan (slots, aux scalars, table) and its
    one pass, and takes a larger chunk only where the model finds it cheaper; off, the
    configured chunk. At the H200's 16 GiB (13.35 GiB free): 11 Mi points, the pass reading z
    from host memory (bench/notes/memory.md, 2026-12-02)."""
    from provetop.engine.memory.stream_plan import CHUNK_STEPS, plan_streaming
    from provetop.kernels.cuda.msm_plan import stream_cost

    sizes = query_sizes(27)
    base = footprint(27, sizes)
    small = 1 << 22
    streamed = {q: small for q in sizes.as_dict()}
    z, tables = aux_scalar_bytes(sizes), twiddle_bytes(27)
    free = int(free_gib * GiB)
    args = (base, sizes.as_dict(), streamed, DEFAULT_TUNING, z, tables)
    ref = plan_with_window(free, *args)
    got = plan_streaming(free, *args)

    def rank(p):
        return (p.slots, p.z_with_h, not p.release_tables)

    assert rank(got.plan) == rank(ref.plan) and got.together >= ref.together
    assert got.plan.need <= free and got.chunk in {small * s // 4 for s in CHUNK_STEPS}

    def cost(sp):
        chunks = -(-sizes.h // sp.chunk)
        c = min(sp.window_max, stream_window_bits(sizes.h, None, chunks))
        return stream_cost(sizes.h, c, chunks)

    assert cost(got) <= cost(replace(ref, chunk=small))
    if free_gib == 13.35:
        assert got.chunk == 11 << 20 and got.together and got.host_scalars
    off = replace(DEFAULT_TUNING, msm_host_chunk_grow="off")
    assert plan_streaming(free, base, sizes.as_dict(), streamed, off, z, tables) == ref


def test_too_small_a_device_names_the_memory_it_would_need():
    fp, z, tables = porep_cuda_footprint()
    need = smallest_need(fp, z, tables)
    assert choose_plan(need, fp, z, tables).slots == 1  # the boundary fits
    with pytest.raises(PlanError, match="smallest plan") as err:
        choose_plan(need - 1, fp, z, tables, device="device 3")
    assert str(err.value).startswith("device 3: ")
    # a card of 6 GiB with 5.5 free would need 0.5 GiB more than its free bytes fall short by
    assert (
        minimum_capacity(6 * GiB, int(5.5 * GiB), fp, z, tables) == 6 * GiB - int(5.5 * GiB) + need
    )


def test_one_slot_needs_about_one_polynomial():
    fp, z, tables = porep_cuda_footprint()
    one, _ = plan_need(1, fp, z)
    two, _ = plan_need(2, fp, z)
    assert fp.u + OPERAND_BYTES + fp.margin <= one < two
    # the one-slot region at 2^27 fits a card of 8 GiB beside a CUDA context (~0.5 GiB)
    assert smallest_need(fp, z, tables) < 7 * GiB


def _force_plan(monkeypatch, slots: int, z_with_h: bool = True) -> None:
    """The cpu ops' footprint is dominated by the reference MSM's scratch (about 9 times a, b
    and c together), so every plan needs the same memory there and the resident one always
    wins; the streamed path is then taken by choosing the plan for the run."""
    from provetop.engine.run import runner

    def choose(free, fp, z=0, tables=0, *, device="device"):
        need = plan_need(slots, fp, z, tables)[0]
        reason = f"{'two slots' if slots == 2 else 'one slot'}: chosen by the test"
        return MemoryPlan(slots, z_with_h, need, free, reason)

    monkeypatch.setattr(runner, "choose_plan", choose)


@pytest.mark.parametrize("slots", [2, 1])
def test_a_streamed_plan_completes_every_partition_exactly(monkeypatch, slots):
    _force_plan(monkeypatch, slots)
    cfg = from_preset("ci", partitions=3, workers_per_device=2, allocator="aware", verify="always")
    engine, events = run_engine(cfg)
    fp = engine.footprint
    plans = [e for e in events if e["k"] == "alloc" and e["site"] == "plan"]
    assert len(plans) == 1 and plans[0]["decision"] == "fallback"
    assert plans[0]["reason"].startswith(f"memory plan {'two slots' if slots == 2 else 'one slot'}")
    done = [e for e in events if e["k"] == "partition_done"]
    assert [e["ok"] for e in done] == [True] * 3 and all(e["verified"] for e in done)
    assert all(e["prestage"] == "fallback" and "memory plan" in e["prestage_reason"] for e in done)
    assert not [e for e in events if e["k"] == "fault"]
    slot_allocs = [e for e in events if e["k"] == "alloc" and e["site"] == "h_slots"]
    assert len(slot_allocs) == 3
    extra = min(fp.u, OPERAND_BYTES) if slots == 1 else 0
    assert {e["requested"] for e in slot_allocs} == {slots * fp.u + extra}
    # no pre-stage and no whole a, b, c on the device: the pre-stage decisions say why
    decisions = [e for e in events if e["k"] == "alloc" and e["site"] == "prestage"]
    assert len(decisions) == 3
    assert all(e["decision"] == "fallback" and "memory plan" in e["reason"] for e in decisions)
    phases = {e["phase"] for e in events if e["k"] == "phase_end"}
    assert "fallback_upload" not in phases and "upload" not in phases and "h_step" in phases


def test_the_cpu_ops_choose_the_resident_plan_with_room_to_spare():
    cfg = from_preset("ci", partitions=1, workers_per_device=1, allocator="aware")
    _engine, events = run_engine(cfg)
    plans = [e for e in events if e["k"] == "alloc" and e["site"] == "plan"]
    assert len(plans) == 1 and plans[0]["decision"] == "ok"
    assert plans[0]["reason"].startswith("memory plan resident")


def test_naive_never_plans(monkeypatch):
    _force_plan(monkeypatch, 1)
    cfg = from_preset("ci", partitions=1, workers_per_device=1, allocator="naive")
    _engine, events = run_engine(cfg)
    assert not [e for e in events if e["k"] == "alloc" and e["site"] in ("plan", "h_slots")]


def test_a_device_too_small_for_any_plan_is_refused_at_start():
    cfg = from_preset("ci", allocator="aware")
    fp = footprint(cfg.domain_log, query_sizes(cfg.domain_log))
    small = from_preset("ci", allocator="aware", device_memory=smallest_need(fp) - 64)
    with pytest.raises(EngineError, match=r"device 0: .* at least"):
        Engine(small, listen=False)


def test_the_cli_refuses_it_with_one_line(capsys):
    cfg = from_preset("ci", allocator="aware")
    fp = footprint(cfg.domain_log, query_sizes(cfg.domain_log))
    size = str(smallest_need(fp) - 64)
    code = main(["engine", "--preset", "ci", "--allocator", "aware", "--device-memory", size])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("provetop: error:") and "at least" in err[0]


def test_aux_scalars_after_h_go_up_only_once_h_is_freed(monkeypatch):
    """A plan with the aux scalars after H (a card of 8 GiB at 2^27) asks for them once per
    attempt, after msm_h and after H's block went back: asked for first, beside H, they were
    refused on the H200 at 8 GiB and every partition was lost."""
    from provetop.engine.partition.cpu import CpuPartition

    _force_plan(monkeypatch, 1, z_with_h=False)
    calls = []
    real_scalars, real_free = CpuPartition.msm_scalars, CpuPartition.h_step_streamed
    slots: dict[int, object] = {}

    def h_step_streamed(self, att, w, plan):
        blk, h = real_free(self, att, w, plan)
        slots[id(att)] = blk
        return blk, h

    def msm_scalars(self, att, w, h):
        blk = slots.get(id(att))
        calls.append((h is None, "msm_h" in att.phases_ms, blk is not None and blk.freed))
        return real_scalars(self, att, w, h)

    monkeypatch.setattr(CpuPartition, "h_step_streamed", h_step_streamed)
    monkeypatch.setattr(CpuPartition, "msm_scalars", msm_scalars)
    cfg = from_preset("ci", partitions=2, workers_per_device=1, allocator="aware", verify="always")
    _engine, events = run_engine(cfg)
    done = [e for e in events if e["k"] == "partition_done"]
    assert [e["ok"] for e in done] == [True, True] and all(e["verified"] for e in done)
    assert calls == [(True, True, True)] * 2


def test_msms_in_one_pass_complete_every_partition_exactly(monkeypatch):
    """The driver's one-pass branch (phase ``msm_interleaved`` in place of the four msm_*
    phases), run on the cpu ops told to take it: every partition verified, the phase
    recorded, and the summary reads it."""
    from provetop.engine.partition.cpu import CpuPartition
    from provetop.recordings.state import State
    from provetop.recordings.summary import format_summary, summarize_state

    def msm_many(self, queries, scalars):
        return {q: self.msm(q, scalars[q]) for q in queries}

    # the cpu ops have no one pass of their own: this is the OnePass they take
    together = ["h", "l", "a", "b_g1"]
    monkeypatch.setattr(CpuPartition, "msm_together", lambda self: together, raising=False)
    monkeypatch.setattr(CpuPartition, "msm_many", msm_many, raising=False)
    cfg = from_preset("ci", partitions=3, workers_per_device=2, allocator="aware", verify="always")
    engine, events = run_engine(cfg)
    done = [e for e in events if e["k"] == "partition_done"]
    assert [e["ok"] for e in done] == [True] * 3 and all(e["verified"] for e in done)
    phases = {e["phase"] for e in events if e["k"] == "phase_end"}
    assert "msm_interleaved" in phases and not phases & {"msm_h", "msm_l", "msm_a", "msm_b_g1"}
    text = format_summary(summarize_state(State().fold(events)))
    assert "msm_il" in text


def _bytes_with_z_on_device(monkeypatch, sizes, streamed, tuning, window_max):
    """The joint pass's bytes if the aux scalars were on the device (no scalar buffers): what
    the buffers of a pass reading them from host memory are counted against."""
    from provetop.engine.memory import stream_plan

    with monkeypatch.context() as m:
        m.setattr(stream_plan, "pass_reads_host_scalars", lambda sizes, streamed: False)
        return stream_plan.interleaved_bytes(sizes, streamed, tuning, window_max)


@pytest.mark.parametrize("free_gib", [5.35, 9.35, 13.35])
def test_a_pass_that_reads_z_from_the_host_plans_without_its_device_copy(monkeypatch, free_gib):
    """With every reader of the aux scalars in it, a joint pass reads them from host memory
    and needs its scalar buffers, not the aux scalars' 4.2 GB: at the H200's 8, 12 and 16 GiB
    (5.35, 9.35 and 13.35 GiB free) the four streamed MSMs run in one pass."""
    from provetop.engine.memory.stream_plan import interleaved_bytes, plan_streaming
    from provetop.kernels.cuda.msm_plan import INTERLEAVE_BUFFERS, pass_lead, pass_scalar_slots

    sizes = query_sizes(27)
    base = footprint(27, sizes)
    streamed = {q: 1 << 22 for q in sizes.as_dict()}
    z, tables = aux_scalar_bytes(sizes), twiddle_bytes(27)
    free = int(free_gib * GiB)
    got = plan_streaming(free, base, sizes.as_dict(), streamed, DEFAULT_TUNING, z, tables)
    assert got.together and got.host_scalars and got.plan.need <= free
    # the pass's bytes count the scalar buffers (two chunks of 32-byte rows here)
    order = [sizes.as_dict()[q] for q in ("h", "l", "a", "b_g1")]
    lead = pass_lead(DEFAULT_TUNING, host_scalars=True)
    slots = pass_scalar_slots(order, got.chunk, [False, True, True, True], INTERLEAVE_BUFFERS, lead)
    chunked = {q: got.chunk for q in streamed}
    with_slots = interleaved_bytes(sizes.as_dict(), chunked, DEFAULT_TUNING, got.window_max)
    without = _bytes_with_z_on_device(
        monkeypatch, sizes.as_dict(), chunked, DEFAULT_TUNING, got.window_max
    )
    assert slots >= 2 and with_slots - without == slots * got.chunk * 32


def _pass_kwargs(bound_backend, **kw):
    """The keywords a bound backend (made with ``kw``) hands its kernel backend's one pass."""

    class Recorder:
        name = "rec"

        def msm_many(self, points, scalars, **args):
            return args

    class Dev:
        def kernel_args(self, site):
            return {}

    return bound_backend(Recorder(), Dev(), 20, ["h", "l"], **kw).msm_many([1, 2], [3, 4])


def test_more_pass_buffers_are_counted_and_reach_the_pass():
    """``PROVETOP_MSM_HOST_BUFFERS``: each buffer more is one more chunk of points (96 bytes a
    point) in the pass's bytes, and the bound backend hands the count to the pass."""
    from provetop.engine.memory.stream_plan import interleaved_bytes
    from provetop.engine.partition.cuda_backend import BoundBackend
    from provetop.kernels.cuda.msm_plan import INTERLEAVE_BUFFERS, pass_scalar_slots

    sizes = query_sizes(27).as_dict()
    chunk = 6 << 20
    streamed = {q: chunk for q in sizes}
    four = interleaved_bytes(sizes, streamed, DEFAULT_TUNING, 20)
    six = interleaved_bytes(sizes, streamed, replace(DEFAULT_TUNING, msm_host_buffers=6), 20)
    assert DEFAULT_TUNING.msm_host_buffers == INTERLEAVE_BUFFERS == 4
    order = [sizes[q] for q in ("h", "l", "a", "b_g1")]
    shared = [False, True, True, True]
    # a copy stream further ahead may also need another scalar buffer (32 bytes a row)
    more_slots = pass_scalar_slots(order, chunk, shared, 6, 5) - pass_scalar_slots(
        order, chunk, shared, 4, 5
    )
    assert more_slots >= 0 and six - four == 2 * chunk * 96 + more_slots * chunk * 32

    assert _pass_kwargs(BoundBackend, buffers=6)["buffers"] == 6
    assert _pass_kwargs(BoundBackend)["buffers"] == 4


def test_the_pass_lead_is_a_setting_the_pass_and_its_scalar_buffers_follow(monkeypatch):
    """``PROVETOP_MSM_HOST_LEAD``: the bound backend hands it to the pass, and the memory model
    counts the scalar buffers of the order that lead gives; ``auto`` (the default) is no lead
    where the pass reads z from host memory and five where it copies z up whole."""
    from provetop.engine.memory.stream_plan import interleaved_bytes
    from provetop.engine.partition.cuda_backend import BoundBackend
    from provetop.kernels.cuda.msm_plan import (
        HOST_SCALARS_LEAD,
        INTERLEAVE_LEAD,
        pass_lead,
        pass_scalar_slots,
    )

    assert DEFAULT_TUNING.msm_host_lead is None
    assert pass_lead(DEFAULT_TUNING, host_scalars=True) == HOST_SCALARS_LEAD == 0
    assert pass_lead(DEFAULT_TUNING, host_scalars=False) == INTERLEAVE_LEAD == 5
    assert pass_lead(replace(DEFAULT_TUNING, msm_host_lead=3), host_scalars=True) == 3
    assert _pass_kwargs(BoundBackend, lead=0)["lead"] == 0
    assert _pass_kwargs(BoundBackend)["lead"] == 5
    sizes = query_sizes(27).as_dict()
    chunk = 16 << 20
    streamed = {q: chunk for q in sizes}
    order = [sizes[q] for q in ("h", "l", "a", "b_g1")]
    shared = [False, True, True, True]
    for lead in (None, 0, 5):
        t = replace(DEFAULT_TUNING, msm_host_lead=lead)
        extra = interleaved_bytes(sizes, streamed, t, 20) - _bytes_with_z_on_device(
            monkeypatch, sizes, streamed, t, 20
        )
        slots = pass_scalar_slots(order, chunk, shared, 4, pass_lead(t, host_scalars=True))
        assert extra == slots * chunk * 32


def test_z_stays_on_the_device_where_a_reader_of_it_is_not_in_the_pass(monkeypatch):
    """B-G1's points on the device (a 40 GiB card) put B-G1 outside the pass: it reads z from
    a device copy, so the plan keeps z on the device and counts it, and the pass has no scalar
    buffers; with every reader streamed, z stays in host memory."""
    from provetop.engine.memory.stream_plan import interleaved_bytes

    sizes = query_sizes(27)
    base = footprint(27, sizes)
    z, tables = aux_scalar_bytes(sizes), twiddle_bytes(27)
    free = int(34.4 * GiB)
    all_streamed = {q: 1 << 22 for q in sizes.as_dict()}
    no_b = {q: 1 << 22 for q in ("h", "l", "a")}
    every = plan_with_window(free, base, sizes.as_dict(), all_streamed, DEFAULT_TUNING, z, tables)
    some = plan_with_window(free, base, sizes.as_dict(), no_b, DEFAULT_TUNING, z, tables)
    assert every.together and every.host_scalars
    assert some.together and not some.host_scalars
    assert interleaved_bytes(sizes.as_dict(), no_b, DEFAULT_TUNING, 20) == (
        _bytes_with_z_on_device(monkeypatch, sizes.as_dict(), no_b, DEFAULT_TUNING, 20)
    )
