"""The trace record stream's decoder and the events made from it, on byte strings built here.

The layout is checked against ``kernels/cuda/src/inject/records.h`` itself (its ``#define``s and
its two structs are parsed), so the C side and the Python side cannot drift apart. The bytes
in the other tests are packed field by field with ``struct`` here, not with the module's own
encoder, so a mistake in the decoder's formats cannot cancel itself out.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from provetop.recordings.schema import EVENTS, MEMORY_FIELDS, validate
from provetop.recordings.state import phantom_bytes
from provetop.sources.trace import records as R
from provetop.sources.trace.events import ALLOC_EVENT_MIN, TraceEvents, memory_fields

ROOT = Path(__file__).resolve().parents[2]
HEADER_H = ROOT / "kernels" / "cuda" / "src" / "inject" / "records.h"
DOC = ROOT / "docs" / "trace-records.md"

GIB = 1 << 30
T0 = 5_000_000_000  # the library's start on the monotonic clock (any value)
PID = 4242


def c_defines() -> dict[str, str]:
    return dict(re.findall(r"^#define PVT_(\w+)\s+(\S+)", HEADER_H.read_text(), re.M))


def c_struct(name: str) -> list[tuple[str, str, int]]:
    """(C type, field, array length) of ``typedef struct name {...}`` in records.h."""
    text = HEADER_H.read_text()
    body = re.search(rf"typedef struct {name} \{{(.*?)\}} {name};", text, re.S)
    assert body, f"struct {name} not found in records.h"
    fields = []
    for line in body.group(1).splitlines():
        line = line.split("//")[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\w+) (\w+)(?:\[(\w+)\])?;", line)
        assert m, f"unexpected line in {name}: {line!r}"
        ctype, field, count = m.groups()
        n = int(c_defines().get(count[4:], count)) if count and count.startswith("PVT_") else 1
        fields.append((ctype, field, int(count) if count and count.isdigit() else n))
    return fields


CODES = {"uint64_t": "Q", "int64_t": "q", "uint32_t": "I", "int32_t": "i", "uint16_t": "H",
         "int16_t": "h", "char": "s"}  # fmt: skip


def test_every_constant_agrees_with_the_c_header() -> None:
    defines = c_defines()
    assert defines.pop("MAGIC") == f'"{R.MAGIC.decode()}"'
    for name, value in defines.items():
        assert hasattr(R, name), f"records.py has no {name} (PVT_{name} in records.h)"
        assert getattr(R, name) == int(value), name
    prefixes = ("KIND_", "API_", "POOL_", "STATUS_")
    python_only = [
        n
        for n in vars(R)
        if n.startswith(prefixes) and n not in ("API_NAMES", "API_ALLOCATOR") and n not in defines
    ]
    assert python_only == []
    kinds = {v for n, v in vars(R).items() if n.startswith("API_") and isinstance(v, int)}
    assert kinds == set(R.API_NAMES)  # every api has its driver call's name


@pytest.mark.parametrize(("name", "fmt"), [("PvtHeader", R.HEADER), ("PvtRecord", R.RECORD)])
def test_struct_layouts_agree_with_the_c_header(name: str, fmt: struct.Struct) -> None:
    codes = "".join(
        f"{n}s" if ctype == "char" else CODES[ctype] * n for ctype, _, n in c_struct(name)
    )
    assert struct.Struct("<" + codes).format == "<" + re.sub(
        r"(\d+)([A-Za-rt-z])", lambda m: m.group(2) * int(m.group(1)), fmt.format[1:]
    )
    assert fmt.size == (R.HEADER_SIZE if name == "PvtHeader" else R.RECORD_SIZE)
    # natural alignment leaves no padding in either struct: the packed sizes are the C sizes
    assert struct.calcsize("@" + codes) == fmt.size


def test_the_doc_names_every_kind() -> None:
    doc = DOC.read_text()
    for name in vars(R):
        if name.startswith("KIND_"):
            assert name in doc, f"docs/trace-records.md does not describe {name}"


# ---- bytes built field by field -------------------------------------------------------------


def header_bytes(
    magic: bytes = b"PVTRACE1", version: int = R.VERSION, interval: int = 100
) -> bytes:
    return struct.pack(
        "<8sHHHHIIQQIIIiQ", magic, version, 64, 80, 0, PID, 1, T0, 1_700_000_000 * 10**9,
        interval, 65536, 130001, 0, 0,
    )  # fmt: skip


def rec(t: int, kind: int, api: int = 0, device: int = 0, flags: int = 0, result: int = 0,
        *v: int) -> bytes:  # fmt: skip
    values = list(v) + [0] * (7 - len(v))
    return struct.pack("<QHHhHiI7Q", T0 + t, kind, api, device, flags, result, 99, *values)


def sample(t: int, device: int, free: int, total: int, plain: int, pools: list[tuple]) -> bytes:
    head = rec(t, R.KIND_SAMPLE, 0, device, len(pools), 0, free, total, plain, 0, 0, 4096, 0)
    return head + b"".join(
        rec(t, R.KIND_POOL, 0, device, flags, 0, handle, reserved, reserved, used, used, thr)
        for handle, reserved, used, thr, flags in pools
    )


def oom(t: int, device: int, asked: int, free: int, pools: list[tuple]) -> bytes:
    alloc = rec(t, R.KIND_ALLOC, R.API_MEM_ALLOC, device, 0, 2, 0, asked)
    head = rec(t, R.KIND_OOM_STATE, R.API_MEM_ALLOC, device, len(pools), 0, free, 80 * GIB, 0)
    return (
        alloc
        + head
        + b"".join(
            rec(t, R.KIND_POOL, R.API_MEM_ALLOC, device, f, 0, h, res, res, used, used, thr)
            for h, res, used, thr, f in pools
        )
    )


DEFAULT = R.POOL_DEFAULT | R.POOL_CURRENT
UNLIMITED = (1 << 64) - 1  # CuPy's MemoryAsyncPool release threshold


def test_decodes_every_field() -> None:
    data = header_bytes() + rec(10, R.KIND_ALLOC, R.API_MEM_ALLOC_ASYNC, 1, 0, 0, 0xA0, 512, 0, 7)
    stream = R.decode(data)
    h = stream.header
    assert h == R.Header(R.VERSION, PID, 1, T0, 1_700_000_000 * 10**9, 100, 65536, 130001, 0)
    assert h.subscribed and not stream.truncated and not stream.exited
    (r,) = stream.records
    assert (r.t_ns, r.kind, r.api, r.device, r.flags, r.result, r.tid) == (
        T0 + 10, R.KIND_ALLOC, R.API_MEM_ALLOC_ASYNC, 1, 0, 0, 99,
    )  # fmt: skip
    assert r.v == (0xA0, 512, 0, 7, 0, 0, 0) and r.api_name == "cuMemAllocAsync"
    assert R.encode_header(h) == data[:64] and R.encode_record(r) == data[64:]


def test_negative_device_and_result_are_signed() -> None:
    (r,) = R.decode(header_bytes() + rec(0, R.KIND_ALLOC, 15, -1, 0, -5)).records
    assert (r.device, r.result) == (-1, -5)


def test_a_truncated_stream_reads_up_to_its_last_whole_record() -> None:
    data = header_bytes() + rec(1, R.KIND_FREE) + rec(2, R.KIND_FREE)
    for cut in (1, 40, 79):
        stream = R.decode(data[: len(data) - cut])
        assert stream.truncated and len(stream.records) == 1 and not stream.complete
    assert R.decode(data).records[1].t_ns == T0 + 2


def test_a_stream_cut_inside_its_header() -> None:
    stream = R.decode(header_bytes()[:30])
    assert stream.header is None and stream.truncated and stream.records == []
    assert R.decode(b"").truncated is False  # nothing written at all: nothing to read


def test_bad_magic_is_a_clear_error() -> None:
    with pytest.raises(R.TraceFormatError, match="not a provetop trace stream"):
        R.decode(header_bytes(magic=b"NOTTRACE"))
    with pytest.raises(R.TraceFormatError, match="magic"):
        R.StreamDecoder().feed(b"GARB")  # said at once, before a whole header came


def test_another_version_is_a_clear_error() -> None:
    other = R.VERSION + 1
    with pytest.raises(R.TraceFormatError, match=f"version {other}.*reads version {R.VERSION}"):
        R.decode(header_bytes(version=other))


def test_feeding_byte_by_byte_gives_the_same_records() -> None:
    data = header_bytes() + sample(5, 0, GIB, 80 * GIB, 0, [(0xD0, GIB, 0, 0, DEFAULT)])
    dec = R.StreamDecoder()
    got = [r for i in range(len(data)) for r in dec.feed(data[i : i + 1])]
    assert got == R.decode(data).records and dec.pending == 0 and dec.records_read == 2


# ---- groups ---------------------------------------------------------------------------------


def test_a_sample_and_its_pools_are_one_item() -> None:
    data = sample(
        0, 0, GIB, 80 * GIB, 3 * GIB, [(0xD0, 8 * GIB, 2 * GIB, UNLIMITED, DEFAULT),
                                       (0xE0, GIB, GIB, 0, R.POOL_CREATED)],
    ) + rec(1, R.KIND_FREE)  # fmt: skip
    items = R.Grouper().push(R.decode(header_bytes() + data).records)
    state, free = items
    assert isinstance(state, R.DeviceState) and state.complete
    assert (state.driver_free, state.plain, state.pinned_host) == (GIB, 3 * GIB, 4096)
    assert [p.handle for p in state.pools] == [0xD0, 0xE0] and state.pool_unused == 6 * GIB
    assert state.pools[0].threshold == UNLIMITED
    assert isinstance(free, R.Record) and free.kind == R.KIND_FREE


def test_an_oom_carries_the_state_read_at_that_instant() -> None:
    data = oom(7, 0, 12 * GIB, 2 * GIB, [(0xD0, 8 * GIB, 0, UNLIMITED, DEFAULT)])
    (item,) = R.Grouper().push(R.decode(header_bytes() + data).records)
    assert isinstance(item, R.Oom) and item.alloc.v[1] == 12 * GIB
    assert item.state is not None and item.state.pool_unused == 8 * GIB


def test_an_oom_whose_state_did_not_fit() -> None:
    data = rec(1, R.KIND_ALLOC, R.API_MEM_ALLOC, 0, 0, 2, 0, GIB) + rec(2, R.KIND_FREE)
    items = R.Grouper().push(R.decode(header_bytes() + data).records)
    assert isinstance(items[0], R.Oom) and items[0].state is None
    assert isinstance(items[1], R.Record)


def test_a_group_cut_by_the_end_of_the_stream() -> None:
    data = sample(0, 0, GIB, 80 * GIB, 0, [(1, 0, 0, 0, 0), (2, 0, 0, 0, 0)])[:-80]
    g = R.Grouper()
    assert g.push(R.decode(header_bytes() + data).records) == []
    (state,) = g.close()
    assert isinstance(state, R.DeviceState) and not state.complete and len(state.pools) == 1


# ---- events ---------------------------------------------------------------------------------


def events_of(data: bytes, **kw: int) -> tuple[TraceEvents, list[dict]]:
    stream = R.decode(header_bytes() + data)
    assert stream.header is not None
    conv = TraceEvents(stream.header, **kw)
    return conv, conv.feed(stream.records) + conv.close()


def test_a_sample_is_the_engines_memory_event() -> None:
    pools = [(0xD0, 8 * GIB, 2 * GIB, UNLIMITED, DEFAULT), (0xE0, GIB, GIB, 0, R.POOL_CREATED)]
    _, (ev,) = events_of(sample(1_000, 0, 5 * GIB, 80 * GIB, 3 * GIB, pools))
    validate(ev)
    assert set(MEMORY_FIELDS) - set(ev) == {
        f for f, spec in MEMORY_FIELDS.items() if not spec.required
    }  # every required field, none of the NVML ones (not the library's to read)
    assert (ev["k"], ev["t"], ev["device"], ev["pid"]) == ("memory", 1_000, 0, PID)
    assert ev["async_reserved"] == 9 * GIB and ev["async_used"] == 3 * GIB
    assert ev["async_high"] == 9 * GIB and ev["sync_used"] == 3 * GIB
    assert (ev["driver_free"], ev["driver_total"], ev["pinned_host"]) == (5 * GIB, 80 * GIB, 4096)
    assert ev["sync_cached"] == 0 and "sync_cached" in ev["unobserved"] and not ev["modeled"]
    assert ev["async_pools"][0]["release_threshold"] == UNLIMITED
    assert ev["async_pools"][0]["default"] and ev["async_pools"][1]["created"]
    assert phantom_bytes(ev) == 6 * GIB  # the reducer's phantom: the stream-ordered part


def test_an_oom_is_a_fault_with_its_phantom() -> None:
    data = oom(50, 0, 12 * GIB, 2 * GIB, [(0xD0, 8 * GIB, 0, UNLIMITED, DEFAULT)])
    conv, (ev,) = events_of(data)
    validate(ev)
    assert (ev["k"], ev["kind"], ev["device"], ev["requested"]) == ("fault", "oom", 0, 12 * GIB)
    assert ev["phantom"] == 8 * GIB and ev["site"] == "cuMemAlloc_v2"
    assert ev["pools"]["async_reserved"] == 8 * GIB and ev["pools"]["driver_free"] == 2 * GIB
    assert set(ev["pools"]) >= {f for f, s in MEMORY_FIELDS.items() if s.required}
    # 2 GiB free + 8 GiB unused < 12 GiB: not the phantom's doing, and the message says so
    assert ev["case"] == "short" and "would not have fitted" in ev["message"]
    assert conv.ooms == 1
    conv, (ev,) = events_of(oom(50, 0, 6 * GIB, 2 * GIB, [(0xD0, 8 * GIB, 0, UNLIMITED, DEFAULT)]))
    assert ev["case"] == "phantom" and "would have made it fit" in ev["message"]


def test_allocations_below_the_floor_make_no_event() -> None:
    small = rec(1, R.KIND_ALLOC, R.API_MEM_ALLOC, 0, 0, 0, 0xA, ALLOC_EVENT_MIN - 1)
    large = rec(2, R.KIND_ALLOC, R.API_MEM_ALLOC_ASYNC, 0, 0, 0, 0xB, ALLOC_EVENT_MIN)
    _, events = events_of(small + large)
    (ev,) = events
    validate(ev)
    assert (ev["site"], ev["pool"], ev["decision"], ev["requested"]) == (
        "cuMemAllocAsync", "async", "ok", ALLOC_EVENT_MIN,
    )  # fmt: skip
    assert (ev["proof"], ev["partition"], ev["worker"]) == (
        -1,
        -1,
        -1,
    )  # the run's, as the engine's


def test_a_programs_own_trim_is_an_alloc_trim() -> None:
    _, (ev,) = events_of(rec(3, R.KIND_POOL_TRIM, R.API_MEM_POOL_TRIM_TO, 0, 0, 0, 0xD0, GIB))
    assert (ev["decision"], ev["requested"], ev["pool"]) == ("trim", GIB, "async")


def test_status_records_become_source_faults() -> None:
    data = rec(0, R.KIND_STATUS, 0, -1, 0, 0, R.STATUS_SUBSCRIBED, 130001) + rec(
        1, R.KIND_STATUS, 0, -1, 0, 0, R.STATUS_RING_FULL, 65536
    )
    _, (ev,) = events_of(data)
    assert ev["kind"] == "source" and "65536 slots" in ev["message"]


def test_exit_and_origin() -> None:
    data = sample(2_000, 0, GIB, 80 * GIB, 0, []) + rec(
        3_000, R.KIND_EXIT, 0, -1, 0, 0, *[0] * 6, 5
    )
    conv, (ev,) = events_of(data, origin_ns=T0 - 1_000)
    assert ev["t"] == 3_000 and conv.exited and conv.dropped == 5


def test_memory_fields_have_the_engines_keys() -> None:
    state = R.DeviceState(
        R.Record(0, R.KIND_SAMPLE, 0, 0, 0, 0, 0, (1, 2, 3, 4, 5, 6, 7)), (), True
    )
    fields = memory_fields(state)
    assert set(MEMORY_FIELDS) - set(fields) <= {
        f for f, spec in MEMORY_FIELDS.items() if not spec.required
    }
    assert fields["sync_used"] == 3 + 5  # plain + VMM physical memory
    assert EVENTS["memory"]["device"].required
