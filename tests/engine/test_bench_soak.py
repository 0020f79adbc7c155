"""``provetop bench soak --short``: the soak bench's stages run end to end and print every
target with its verdict (the figures themselves are for the long run: docs/reliability.md)."""

from __future__ import annotations

import json

from provetop.cli import main
from provetop.engine.bench.soak import malloc_bytes


def test_the_short_soak_runs_every_stage_and_prints_the_targets(tmp_path, capsys):
    out = tmp_path / "soak.json"
    code = main(["bench", "soak", "--short", "--json", str(out)])
    text = capsys.readouterr().out
    assert code in (0, 1)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0].startswith("soak: ci preset, --verify never")
    verdicts = [line.split()[0] for line in lines[1:4]]
    assert set(verdicts) <= {"PASS", "FAIL"} and len(verdicts) == 3
    figures = json.loads(out.read_text())
    assert figures["served"] == figures["cycles"] == 100
    assert figures["partitions"] > 0 and figures["rss_after_storm"] > 0
    # RSS over time, not only two points: a sample a second in --short (every 30 s otherwise)
    series = figures["rss_series"]
    assert len(series) >= 10 and all(rss > 0 for _, rss, *_ in series)
    assert [t for t, *_ in series] == sorted(t for t, *_ in series)
    if malloc_bytes() is not None:  # glibc: the allocator's in-use and kept-free bytes too
        assert all(used > 0 and free >= 0 for _, _, used, free in series)
    assert figures["heap_trim_every_s"] in (0, 30.0) and figures["heap_trims"] >= 0
    # what must hold even in seconds on a shared machine: the storm leaves memory alone
    assert abs(figures["rss_after_storm"] - figures["rss_late"]) < 50 << 20
