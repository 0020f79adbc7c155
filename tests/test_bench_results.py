"""bench/results: every file in its topic folder and in the generated INDEX.md, every
``bench/results/...`` path a doc cites is there, and every file is cited or archived
(``bench/results_index.py`` holds the rules; run it to regenerate the index)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("results_index", ROOT / "bench/results_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


ri = _load()


@pytest.fixture(scope="module")
def repo():
    found, layout = ri.entries()
    by_entry, missing = ri.resolve(found, ri.citations())
    return found, layout, by_entry, missing


def test_every_result_is_in_its_topic_folder(repo):
    _, layout, _, _ = repo
    assert layout == []


def test_the_index_lists_every_file_and_is_up_to_date(repo):
    found, _, by_entry, _ = repo
    index = (ROOT / "bench/results/INDEX.md").read_text(encoding="utf-8")
    on_disk = [
        p for p in (ROOT / "bench/results").rglob("*") if p.is_file() and p.name != "INDEX.md"
    ]
    assert on_disk, "bench/results is empty"
    unlisted = [str(p.relative_to(ROOT)) for p in on_disk if p.name not in index]
    assert unlisted == [], "not in INDEX.md; run python3 bench/results_index.py"
    assert index == ri.render(found, by_entry), "stale; run python3 bench/results_index.py"


def test_every_cited_result_exists(repo):
    _, _, _, missing = repo
    assert missing == []


def test_every_result_is_cited_or_archived(repo):
    _, _, by_entry, _ = repo
    uncited = [p for p, docs in by_entry.items() if not docs and p not in ri.ARCHIVE]
    assert uncited == [], "cite these in a doc, remove them, or add them to ARCHIVE"
    stale = [p for p in ri.ARCHIVE if p not in by_entry or by_entry[p]]
    assert stale == [], "ARCHIVE entries that are cited or gone"


def test_topic_rules():
    assert ri.topic_of("ntt-h200-20261203T0636-r1-ea099cb.json") == "ntt"
    assert ri.topic_of("msm-dense-device-standing-20261203T171601-c41deea.json") == "msm"
    assert ri.topic_of("pipeline-h200-20261203T1435-aware-5ddb770.json") == "pipeline"
    assert ri.topic_of("ncu-h200-20261203-5ddb770-msub") == "profiles"
    with pytest.raises(ValueError, match="no topic rule"):
        ri.topic_of("mystery-h200-20261203.json")


def test_brace_lists_expand_like_a_shell():
    assert ri.expand("a-{1,2}-{x,y}.json") == [
        "a-1-x.json",
        "a-1-y.json",
        "a-2-x.json",
        "a-2-y.json",
    ]
    assert ri.expand("plain.json") == ["plain.json"]


def _tree(tmp_path: Path, doc: str) -> Path:
    (tmp_path / "bench/results/ntt").mkdir(parents=True)
    (tmp_path / "bench/results/ntt/ntt-h200-20261203-abc1234.json").write_text("{}")
    (tmp_path / "bench/results/ntt/ntt-h200-20261203-abc1234.log").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/x.md").write_text(doc)
    return tmp_path


def test_a_cited_glob_covers_its_files_and_a_fresh_index_passes(tmp_path):
    root = _tree(tmp_path, "See `bench/results/ntt/ntt-h200-20261203-abc1234.{json,log}`.\n")
    ri.write(root)
    assert ri.problems(root) == []


def test_the_checks_catch_a_missing_citation_an_uncited_file_and_a_stale_index(tmp_path):
    root = _tree(
        tmp_path,
        "`bench/results/ntt/ntt-h200-20261203-abc1234.json`, `bench/results/ntt/gone.json`",
    )
    ri.write(root)
    (root / "bench/results/ntt/ntt-h200-20261204-def5678.json").write_text("{}")
    (root / "bench/results/msm-loose.json").write_text("{}")
    found = "\n".join(ri.problems(root))
    assert "ntt/gone.json (cited in docs/x.md): no such file" in found
    assert "ntt-h200-20261203-abc1234.log: cited by no doc" in found
    assert "msm-loose.json: not in a topic folder" in found
    assert "INDEX.md: stale" in found
