"""The cuzk line parser: every format of docs/cuzk.md, and total on any input."""

from __future__ import annotations

import random
import string

import pytest

from provetop.sources.cuzk.parse import (
    Malformed,
    PanicLine,
    TimelineLine,
    TimingLine,
    TraceLine,
    parse_line,
    parse_value,
)


def test_timing_lines():
    rng = random.Random()
    ntt, tot = rng.randint(0, 10**6), rng.randint(0, 10**6)
    rec = parse_line(f"CUZK_TIMING: gpu_tid=0 ntt_msm_h_ms={ntt}")
    assert rec == TimingLine({"gpu_tid": 0, "ntt_msm_h_ms": ntt})
    rec = parse_line(f"CUZK_TIMING: gpu_tid=1 tail_msm_ms=83 gpu_total_ms={tot}")
    assert rec.fields["gpu_total_ms"] == tot
    free = rng.randint(0, 1 << 20)
    rec = parse_line(
        f"CUZK_TIMING: prestage_vram free_mib={free} usable_mib={max(0, free - 512)} "
        "need_da_mib=4096 need_dbc_mib=8192 total_mib=12288"
    )
    assert rec.tags == ("prestage_vram",) and rec.fields["free_mib"] == free
    assert parse_line("CUZK_TIMING: prestage_setup=skip_vram").fields == {
        "prestage_setup": "skip_vram"
    }
    assert parse_line("CUZK_TIMING: host_register=fallback err=712").fields["err"] == 712
    rec = parse_line("CUZK_TIMING: prestage_setup=ok domain=134217728 lot_of_memory=1")
    assert rec.fields == {"prestage_setup": "ok", "domain": 134217728, "lot_of_memory": 1}
    assert isinstance(parse_line("CUZK_TIMING: tail_msm_ms="), Malformed)
    assert isinstance(parse_line("CUZK_TIMING:"), Malformed)


def test_timeline_lines_and_prefixes():
    rng = random.Random()
    off = rng.randint(0, 10**9)
    job = f"{rng.getrandbits(128):032x}"
    rec = parse_line(f"TIMELINE,{off},GPU_END,{job},worker=3,partition=7,gpu_ms=1824")
    assert rec == TimelineLine(
        off, "GPU_END", job, {"worker": "3", "partition": "7", "gpu_ms": "1824"}
    )
    assert rec.int_detail("partition") == 7 and rec.int_detail("nope") is None
    assert parse_line(f"TIMELINE,{off},GPU_QUEUE,{job},monolithic").detail == {"monolithic": ""}
    assert parse_line(f"TIMELINE,{off},SYNTH_START,{job},kind=porep-c2").detail["kind"]
    assert parse_line(f"TIMELINE,{off},GPU_PICKUP,{job},").detail == {}
    journald = f"Nov 29 12:00:00 host cuzk-daemon[42]: TIMELINE,{off},SYNTH_END,{job},x=1"
    assert parse_line(journald).offset_ms == off
    for cut in ("TIMELINE,12,GPU_E", "TIMELINE,12", "TIMELINE,-1,A,b,", "TIMELINE,1,lower,j,"):
        assert isinstance(parse_line(cut), Malformed), cut
    assert parse_line("NOTTIMELINE,1,A,b,c") is None  # a tag inside a word is not a tag


def test_tracing_lines_text_ansi_json():
    line = (
        "\x1b[2m2026-11-29T12:00:01.123456Z\x1b[0m \x1b[31mERROR\x1b[0m gpu_worker{worker_id=1 "
        "gpu=0 job_id=abc proof_kind=PoRep partition=Some(3)}: cuzk_core::engine: "
        "GPU prove start failed error=CUDA error 2: out of memory"
    )
    rec = parse_line(line)
    assert isinstance(rec, TraceLine) and rec.level == "ERROR"
    assert rec.message == "GPU prove start failed" and rec.target == "cuzk_core::engine"
    assert rec.fields == {"error": "CUDA error 2: out of memory"}
    assert rec.get("partition") == 3 and rec.get("job_id") == "abc"
    assert rec.wall_ns % 1_000_000_000 == 123_456_000
    rec = parse_line(
        '{"timestamp":"2026-11-29T12:00:01.5Z","level":"WARN","fields":{"message":"m",'
        '"partition":4},"target":"t","span":{"name":"s","job_id":"j"}}'
    )
    assert (rec.level, rec.message, rec.get("partition"), rec.get("job_id")) == (
        "WARN",
        "m",
        4,
        "j",
    )
    assert parse_line("{not json") is None
    assert parse_line("thread 'tokio-runtime-worker' panicked at src/a.rs:1:2:") == PanicLine(
        "tokio-runtime-worker", "src/a.rs:1:2:"
    )


@pytest.mark.parametrize(
    "raw, value",
    [("12", 12), ("-3", -3), ("1.5", 1.5), ("Some(7)", 7), ("None", None), ('"a b"', "a b")],
)
def test_values(raw, value):
    assert parse_value(raw) == value


def test_parser_is_total_on_random_and_mutated_input():
    rng = random.Random()
    seeds = [
        "CUZK_TIMING: gpu_tid=0 tail_msm_ms=83 gpu_total_ms=1824",
        "TIMELINE,123,GPU_END,job,worker=1,partition=2,gpu_ms=9",
        "2026-11-29T12:00:01Z  INFO a{b=c}: t: message k=v",
        '{"level":"INFO","fields":{"message":"x"}}',
    ]
    alphabet = string.printable + "\x00\xff{}=,:\u2603"
    for _ in range(3000):
        if rng.random() < 0.5:
            line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        else:
            chars = list(rng.choice(seeds))
            for _ in range(rng.randint(1, 6)):
                i = rng.randrange(len(chars) + 1)
                op = rng.random()
                if op < 0.4 and i < len(chars):
                    del chars[i]
                elif op < 0.8:
                    chars.insert(i, rng.choice(alphabet))
                else:
                    chars = chars[:i]
            line = "".join(chars)
        rec = parse_line(line)
        assert rec is None or isinstance(
            rec, TimingLine | TimelineLine | TraceLine | PanicLine | Malformed
        )
