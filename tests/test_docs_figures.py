"""The figures the docs quote for the bundled sample recordings, recomputed from the samples,
and no path of a development machine anywhere in the docs.

Why: the README once quoted "6 retries, three of them phantoms" for a sample that has 5 OOMs
and four phantoms; a new user replays the sample and sees the other numbers."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from provetop.recordings.reader import open_recording
from provetop.recordings.state import async_cached
from provetop.recordings.summary import build_summary

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "recordings" / "samples"
README = ROOT / "README.md"
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def _ooms(path: Path) -> list[dict]:
    return [e for e in open_recording(path).events if e["k"] == "fault" and e["kind"] == "oom"]


def phantoms(path: Path) -> list[str]:
    """The OOMs that were phantoms: a plain (``cudaMalloc``) allocation refused although the
    driver's free memory plus the stream-ordered pool's reserved-but-unused bytes held it."""
    found = []
    for e in _ooms(path):
        pools = e["pools"]
        plain = e["message"].startswith("out of memory: sync allocation")
        if plain and e["requested"] <= pools["driver_free"] + async_cached(pools):
            found.append(f"{e['proof']}/{e['partition']}")
    return found


def _rows() -> list[tuple[str, str]]:
    text = (SAMPLES / "README.md").read_text()
    # the three-column table (file | run | what it shows), not the one of commits and dates
    return re.findall(r"^\| `([\w-]+\.pvtrec)` \| [^|]+ \| ([^|]+) \|$", text, re.M)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize(("name", "said"), _rows(), ids=[r[0] for r in _rows()])
def test_every_figure_in_the_samples_table_is_the_samples_own(name, said):
    s = build_summary(SAMPLES / name)
    t = s["totals"]
    checked = 0
    if m := re.search(r"(\d+)/(\d+) (?:partitions )?completed", said):
        assert (int(m[1]), int(m[2])) == (t["partitions_ok"], t["partitions"])
        checked += 1
    if m := re.search(r"\**(\d+) OOMs", said):
        assert int(m[1]) == t["ooms"]
        checked += 1
    if m := re.search(r"(\d+)/(\d+) checks true", said):
        assert int(m[1]) == int(m[2]) == t["partitions_verified"]
        checked += 1
    if m := re.search(r"(\d+) attempts", said):
        assert int(m[1]) == t["attempts"]
        checked += 1
    if m := re.search(r"[Mm]edian gpu_total\** ([\d,.]+) ms", said):
        ok = [a["gpu_total_ms"] for a in s["attempts"] if a["ok"]]
        assert abs(_num(m[1]) - statistics.median(ok)) < 1.0
        checked += 1
    if m := re.search(r"([\d.]+) s/proof", said):
        assert abs(_num(m[1]) - t["s_per_proof"]) < 0.06
        checked += 1
    assert checked >= 2, f"no figure of {name} was found to check"


def test_the_phantoms_the_samples_readme_names_are_the_samples_phantoms():
    text = (SAMPLES / "README.md").read_text()
    found = phantoms(SAMPLES / "h200-porep32g-naive16.pvtrec")
    *head, last = found
    assert f"**Partitions {', '.join(head)} and {last}: the seed's phantom.**" in text


def test_the_readme_quotes_the_sample_it_tells_a_new_user_to_replay():
    sample = SAMPLES / "h200-porep32g-naive16.pvtrec"
    t = build_summary(sample)["totals"]
    n = len(phantoms(sample))
    text = " ".join(README.read_text().split())
    assert f"{t['ooms']} OOMs and {t['retries']} retries, {WORDS[n]} of them phantoms" in text
    assert "stream-ordered pool" in text
    assert "held by CuPy's caching pool" not in text


DEV_PATHS = re.compile(r"(?<![\w.~])(/work/|/home/\w|/root/|/tmp/release|/Users/)")


def test_no_document_cites_a_development_machine_path():
    skip = (".git", ".venv", "__snapshots__", "node_modules", ".mypy_cache", ".ruff_cache")
    docs = [
        p
        for suffix in (".md", ".txt")
        for p in ROOT.rglob(f"*{suffix}")
        if not set(p.relative_to(ROOT).parts) & set(skip) and not p.parts[-2].startswith(".venv")
    ]
    found = []
    for path in docs:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if DEV_PATHS.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert found == []


def test_readme_links_work_on_a_package_index_page():
    """A package index shows the README alone: a relative link there leads nowhere. Paths
    are named as code (they are in the repository); links are absolute."""
    links = re.findall(r"\]\(([^)]+)\)", README.read_text())
    assert [link for link in links if not re.match(r"https?://", link)] == []
