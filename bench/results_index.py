"""The index of ``bench/results/``: one folder per topic, and ``INDEX.md`` generated from them.

Every result file (a bench JSON, a device call's log, a profile's folder) lives in the folder of
its topic, and the topic is decided by the file's name, by the rules in :data:`TOPICS` (the first
prefix that matches). ``INDEX.md`` lists every file of every topic with the docs that cite it,
and an archive section for the files kept although no doc cites them (:data:`ARCHIVE`, each with
its reason). ``tests/test_bench_results.py`` fails when the index is stale, when a doc cites a
path that is not there, or when a file is cited by nothing and not archived.

A citation is any ``bench/results/...`` path in a doc (:data:`DOC_GLOBS`); it may use shell
globs (``*``, ``?``, ``[...]``) and brace lists (``{json,txt}``), and must match at least one
file or folder. Usage, from the repository root::

    python3 bench/results_index.py              # rewrite bench/results/INDEX.md
    python3 bench/results_index.py --check      # list what is wrong, exit 1 if anything is
    python3 bench/results_index.py --add F...   # move new result files into their topics
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "bench/results"
INDEX = "INDEX.md"

# (topic, what its files are, the name prefixes that put a file there). The order is the
# index's; a name matching no prefix is an error, so a new kind of result gets a rule here.
TOPICS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ntt", "`provetop bench ntt` runs and the NTT's device-call logs", ("ntt-",)),
    (
        "msm",
        "`provetop bench msm` runs (general and fixed-base), the MSM's A/B logs and probes",
        ("msm-", "fixed-", "heads-probe-", "msub-", "sqr-kar-", "paired-"),
    ),
    ("field", "the field-multiplication micro-benchmark (`bench/fp64_mul`)", ("fp64-mul-",)),
    (
        "kernels",
        "device calls that time the NTT and the MSM together (standing figures, small sizes, "
        "lazy forms)",
        ("standing-", "small-", "lazy-", "kernels-ab-"),
    ),
    ("profiles", "Nsight Compute reports, one folder per device call", ("ncu-",)),
    (
        "pipeline",
        "`provetop bench pipeline` runs (porep-32g on an H200), their summaries, tables and "
        "stack samples",
        ("pipeline-", "engine-"),
    ),
    (
        "memory",
        "the device-memory sweep, the streamed pass alone, host pinning",
        ("sweep-", "stream-probe-", "pin-probe-"),
    ),
    ("soak", "`provetop bench soak` and the heap and storm probes of the CPU engine", ("soak-",)),
    ("tui", "`provetop bench tui`: the dashboard's latency, open and seek", ("tui-",)),
    (
        "telemetry",
        "the `/metrics` endpoint's cost, NVML on a card, the telemetry server under load and "
        "floods (`provetop bench flood`), a real Prometheus counting a fault-injected run",
        ("metrics-overhead-", "gpu-metrics-", "load-clients-", "prometheus-faults-", "flood-"),
    ),
    (
        "trace",
        "`provetop trace` on a GPU: its tests' evidence, the engine traced from outside, its cost",
        ("trace-",),
    ),
    (
        "checks",
        "GPU test logs, self-tests, the cold start, the first partition, signals on a CUDA run, "
        "the bench after a change of structure, the slim install and `top` on a card",
        (
            "coldstart-",
            "first-partition-",
            "gpu-check-",
            "gpu-health-",
            "gpu-tests-",
            "selftest-",
            "signals-",
            "slim-install-",
            "top-check-",
        ),
    ),
)

# Files kept although no doc cites them, each with why (paths relative to bench/results).
ARCHIVE: dict[str, str] = {}

# The docs whose ``bench/results/...`` paths count as citations.
DOC_GLOBS = ("README.md", "docs/*.md", "bench/notes/*.md", "*/README.md", "*/*/README.md")

_CITATION = re.compile(r"bench/results/[^\s`'\"()<>|]*")
_DATE = re.compile(r"(20\d\d)(\d\d)(\d\d)(?:T(\d\d)(\d\d))?")


def topic_of(name: str) -> str:
    """The topic folder of a result named ``name`` (its first path part); ValueError if no
    rule of :data:`TOPICS` takes it."""
    for topic, _, prefixes in TOPICS:
        if name.startswith(prefixes):
            return topic
    raise ValueError(f"no topic rule in bench/results_index.py takes {name!r}")


@dataclass(frozen=True)
class Entry:
    """One result: a file, or a folder of files (a profile's reports), in its topic folder."""

    topic: str
    name: str
    files: tuple[str, ...] = ()  # a folder's files; empty for a file

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.name}"

    def paths(self) -> list[str]:
        """Every path a citation may name: the entry, and a folder's files."""
        return [self.path, self.path + "/"] + [f"{self.path}/{f}" for f in self.files]


def entries(root: Path = ROOT) -> tuple[list[Entry], list[str]]:
    """The results in their topic folders, and the problems of the folders' layout (a file at
    the top, a folder that is no topic, a file in another topic's folder)."""
    base = root / RESULTS
    found: list[Entry] = []
    problems: list[str] = []
    topics = {t for t, _, _ in TOPICS}
    for item in sorted(base.iterdir()):
        if item.name == INDEX:
            continue
        if item.is_file():
            problems.append(f"{RESULTS}/{item.name}: not in a topic folder (--add moves it)")
        elif item.name not in topics:
            problems.append(f"{RESULTS}/{item.name}/: not a topic of bench/results_index.py")
    for topic, _, _ in TOPICS:
        folder = base / topic
        if not folder.is_dir():
            continue
        for item in sorted(folder.iterdir()):
            try:
                if topic_of(item.name) != topic:
                    problems.append(
                        f"{RESULTS}/{topic}/{item.name}: belongs in {topic_of(item.name)}/"
                    )
            except ValueError as err:
                problems.append(f"{RESULTS}/{topic}/{item.name}: {err}")
            inner = tuple(sorted(str(p.relative_to(item)) for p in item.rglob("*") if p.is_file()))
            found.append(Entry(topic, item.name, inner if item.is_dir() else ()))
    return found, problems


def expand(pattern: str) -> list[str]:
    """``a{b,c}d{e,f}`` -> the four names, as a shell expands brace lists (not nested)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [name for part in match.group(1).split(",") for name in expand(head + part + tail)]


def citations(root: Path = ROOT) -> dict[str, set[str]]:
    """``{pattern relative to bench/results: docs citing it}`` from every doc of
    :data:`DOC_GLOBS` (a bare mention of the folder itself is no citation)."""
    docs = sorted(
        {
            p
            for g in DOC_GLOBS
            for p in root.glob(g)
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
        }
    )
    found: dict[str, set[str]] = {}
    for doc in docs:
        rel = str(doc.relative_to(root))
        if rel.startswith(RESULTS + "/"):
            continue
        for raw in _CITATION.findall(doc.read_text(encoding="utf-8")):
            pattern = raw.rstrip(".,;:")[len(RESULTS) + 1 :]
            if pattern:
                found.setdefault(pattern, set()).add(rel)
    return found


def resolve(
    found: list[Entry], cited: dict[str, set[str]]
) -> tuple[dict[str, set[str]], list[str]]:
    """``{entry path: docs citing it}``, and one problem per citation that matches nothing."""
    by_entry: dict[str, set[str]] = {e.path: set() for e in found}
    owner = {p: e.path for e in found for p in e.paths()}
    by_topic = {t for t, _, _ in TOPICS}
    problems: list[str] = []
    for pattern, docs in sorted(cited.items()):
        if pattern == INDEX or pattern.rstrip("/") in by_topic:
            continue  # the index, or a mention of a topic's folder: no file's citation
        hits = {owner[p] for name in expand(pattern) for p in fnmatch.filter(owner, name)}
        if not hits:
            problems.append(
                f"{RESULTS}/{pattern} (cited in {', '.join(sorted(docs))}): no such file"
            )
        for path in hits:
            by_entry[path] |= docs
    return by_entry, problems


def _date(name: str) -> str:
    match = _DATE.search(name)
    if not match:
        return ""
    y, m, d, hh, mm = match.groups()
    return f"{y}-{m}-{d}" + (f" {hh}:{mm}" if hh else "")


def render(found: list[Entry], by_entry: dict[str, set[str]]) -> str:
    """The text of INDEX.md."""
    lines = [
        "# bench/results: the index",
        "",
        "Generated by `python3 bench/results_index.py` from the files and the docs that cite",
        "them; do not edit it by hand. Each bench JSON's `meta` records the GPU, driver,",
        "versions, commit, date and exact command. A file's topic comes from its name (the rules",
        "are in `bench/results_index.py`); `python3 bench/results_index.py --add FILE...` moves",
        "new results into their folders. What each experiment asked and decided is in",
        "`bench/notes/`; the standing figures are in `docs/performance.md`.",
        "",
        "| topic | entries | what |",
        "| --- | --- | --- |",
    ]
    count = {t: sum(e.topic == t for e in found) for t, _, _ in TOPICS}
    lines += [f"| [{t}](#{t}) | {count[t]} | {what} |" for t, what, _ in TOPICS if count[t]]
    for topic, what, _ in TOPICS:
        rows = [e for e in found if e.topic == topic]
        if not rows:
            continue
        lines += ["", f"## {topic}", "", what + ".", "", "| file | date | cited by |"]
        lines.append("| --- | --- | --- |")
        for e in rows:
            name = f"`{e.name}/` ({', '.join(e.files)})" if e.files else f"`{e.name}`"
            docs = ", ".join(sorted(by_entry.get(e.path, ()))) or "archive"
            lines.append(f"| {name} | {_date(e.name)} | {docs} |")
    lines += ["", "## Archive", ""]
    if ARCHIVE:
        lines += ["Kept although no doc cites them.", "", "| file | why it is kept |"]
        lines += ["| --- | --- |"] + [f"| `{p}` | {why} |" for p, why in sorted(ARCHIVE.items())]
    else:
        lines.append("None: every file here is cited by a doc.")
    return "\n".join(lines) + "\n"


def problems(root: Path = ROOT) -> list[str]:
    """Everything the test asserts, as messages: the layout, citations that match nothing,
    files cited by nothing and not archived, archive entries that are cited or missing, and a
    stale INDEX.md."""
    found, out = entries(root)
    by_entry, missing = resolve(found, citations(root))
    out += missing
    for path, docs in sorted(by_entry.items()):
        if not docs and path not in ARCHIVE:
            out.append(f"{RESULTS}/{path}: cited by no doc; remove it or add it to ARCHIVE")
        if docs and path in ARCHIVE:
            out.append(f"{RESULTS}/{path}: in ARCHIVE but cited by {', '.join(sorted(docs))}")
    out += [f"{RESULTS}/{p}: in ARCHIVE but not there" for p in ARCHIVE if p not in by_entry]
    index = root / RESULTS / INDEX
    if not index.is_file() or index.read_text(encoding="utf-8") != render(found, by_entry):
        out.append(f"{RESULTS}/{INDEX}: stale; run python3 bench/results_index.py")
    return out


def write(root: Path = ROOT) -> None:
    found, _ = entries(root)
    by_entry, _ = resolve(found, citations(root))
    (root / RESULTS / INDEX).write_text(render(found, by_entry), encoding="utf-8")


def add(paths: list[str], root: Path = ROOT) -> None:
    """Move each result file or folder into its topic folder (by its name's rule)."""
    for raw in paths:
        src = Path(raw)
        dst = root / RESULTS / topic_of(src.name) / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            raise SystemExit(f"{dst.relative_to(root)} exists already")
        shutil.move(str(src), dst)
        print(f"{src} -> {dst.relative_to(root)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list problems; exit 1 if any")
    parser.add_argument("--add", nargs="+", metavar="FILE", help="move results into topics")
    args = parser.parse_args(argv)
    if args.add:
        add(args.add)
    if args.check:
        found = problems()
        print("\n".join(found) or "bench/results: index up to date, every citation found")
        return 1 if found else 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
