"""The kernels' measurement settings (``PROVETOP_*`` environment variables), read once.

Why a record and not ``os.environ`` lookups where each knob is used: an A/B run must say what
it changed. Every setting is parsed and checked in one place (a bad value is one
:class:`SettingError` naming the variable, before any work starts), the record is passed down
explicitly to whatever needs it, and its :meth:`KernelTuning.as_dict` goes into every bench
JSON's ``meta`` (and, through :mod:`provetop.engine.settings.tuning`, into every run's ``hello``
event). The
table in ``engine/README.md`` is generated from :data:`SETTINGS` and a test compares the two.

The engine adds its own settings in :mod:`provetop.engine.settings.tuning`; this module knows only
the
kernels'.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PIN_METHODS = ("register", "alloc")
ON_OFF = ("off", "on")
MSM_SORTS = ("counting", "radix", "auto")


class SettingError(ValueError):
    """A ``PROVETOP_*`` variable with a value that cannot be used; the message names it."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: the record field it fills, how it is parsed, and the row of
    the README table that documents it."""

    env: str
    field: str
    parse: Callable[[str], Any]
    values: str  # the README's "values" column
    doc: str  # the README's "what it changes" column


def choice(env: str, allowed: tuple[str, ...]) -> Callable[[str], str]:
    """A parser that accepts one of ``allowed`` and names ``env`` in its error."""

    def parse(raw: str) -> str:
        if raw not in allowed:
            raise SettingError(f"{env}={raw!r}: expected one of {', '.join(allowed)}")
        return raw

    return parse


def _int_at_least(env: str, low: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise SettingError(f"{env}={raw!r}: expected an integer") from None
        if value < low:
            raise SettingError(f"{env}={raw!r}: must be at least {low}")
        return value

    return parse


def _auto_or_int_at_least(env: str, low: int) -> Callable[[str], int | None]:
    """``auto`` (None: the code chooses) or an integer of at least ``low``."""
    number = _int_at_least(env, low)

    def parse(raw: str) -> int | None:
        return None if raw.strip() == "auto" else number(raw)

    return parse


def parse_defines(raw: str, source: str) -> tuple[tuple[str, str], ...]:
    """``"A=1,B"`` -> ``(("A", "1"), ("B", "1"))``: compile-time defines of one kernel source
    (NAME alone is NAME=1), as ``PROVETOP_*_DEFINES`` and ``prebuild --define`` read them, so
    that both name the same cubin. ``source`` (a variable or a flag) is named in the error."""
    out: list[tuple[str, str]] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        if not key.isidentifier():
            raise SettingError(f"{source}: {key!r} is not a C identifier")
        out.append((key, value or "1"))
    return tuple(out)


def _defines_of(env: str) -> Callable[[str], tuple[tuple[str, str], ...]]:
    """The setting parser of ``env``'s defines (:func:`parse_defines`)."""
    return lambda raw: parse_defines(raw, env)


def _text(raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True)
class KernelTuning:
    """The kernels' settings; the defaults are what the published figures use."""

    ntt_defines: tuple[tuple[str, str], ...] = ()
    pin_method: str = "register"
    msm_defines: tuple[tuple[str, str], ...] = ()
    # measured on the H200, 2026-12-03 (8338651): auto against counting 12.6 / 12.6 ms at 2^20
    # (counting taken), 39.4 / 40.1 at 2^22, 122.8 / 132.2 at 2^24, 848.8 / 890.6 at 2^27,
    # ones-heavy 2^27 94.7 / 94.8 (counting taken); the pools within the model
    msm_sort: str = "auto"
    # points per chunk of an MSM whose points stream from host memory: 2^22 = 384 MiB per
    # device buffer (two buffers) plus the chunk's own scratch (~1 GiB at a 2^22 chunk)
    msm_host_chunk: int = 1 << 22
    msm_host_chunk_grow: str = "on"
    # chunk buffers of the engine's one streamed pass (why four: provetop.kernels.cuda.msm_plan, at
    # INTERLEAVE_BUFFERS, which is this default)
    msm_host_buffers: int = 4
    # H's chunks the one pass takes before any other query's; None: by where the aux scalars
    # come from (provetop.kernels.cuda.msm_plan.pass_lead: 0 read from host memory, 5 copied up
    # whole)
    msm_host_lead: int | None = None
    cubin_dir: str = ""  # empty: the package's own prebuilt folder
    inject_dir: str = ""  # empty: the user's cache (the trace library's build folder)
    cupti_dir: str = ""  # empty: CUPTI from the pip wheels, then the toolkit
    commit: str = ""  # empty: ``git rev-parse HEAD`` where git is there

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KernelTuning:
        """Every kernel setting from ``environ`` (default ``os.environ``), checked; raises
        :class:`SettingError` for the first bad one."""
        return cls(**read(SETTINGS, os.environ if environ is None else environ))

    def as_dict(self) -> dict[str, Any]:
        """The record as plain values (msgpack and JSON safe), for ``hello`` and bench meta."""
        out = dataclasses.asdict(self)
        out["ntt_defines"] = {k: v for k, v in self.ntt_defines}
        out["msm_defines"] = {k: v for k, v in self.msm_defines}
        return out


# The record every function falls back to when its caller passes none: the defaults above.
DEFAULT_TUNING = KernelTuning()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "PROVETOP_NTT_DEFINES",
        "ntt_defines",
        _defines_of("PROVETOP_NTT_DEFINES"),
        "`NAME=VALUE,...` (default none)",
        "compile-time defines of the NTT source (e.g. `NTT_MIN_BLOCKS`, `MONT_PORTABLE`); "
        "the NTT module is compiled again for each distinct set",
    ),
    Setting(
        "PROVETOP_PIN_METHOD",
        "pin_method",
        choice("PROVETOP_PIN_METHOD", PIN_METHODS),
        "`register` (default), `alloc`",
        "how host buffers are page-locked: a large-page mapping then cudaHostRegister, or "
        "cudaHostAlloc (also the fallback when registering fails, reported as a "
        "`registration` fault)",
    ),
    Setting(
        "PROVETOP_MSM_DEFINES",
        "msm_defines",
        _defines_of("PROVETOP_MSM_DEFINES"),
        "`NAME=VALUE,...` (default none)",
        "compile-time defines of the MSM source (e.g. `MONT_MUL_KARATSUBA`, `MONT_SQR_SOS`); "
        "the MSM module is compiled again for each distinct set",
    ),
    Setting(
        "PROVETOP_MSM_SORT",
        "msm_sort",
        choice("PROVETOP_MSM_SORT", MSM_SORTS),
        "`auto` (default), `counting`, `radix`",
        "how the MSM orders its entries by bucket after counting them: one global atomic per "
        "entry (`counting`), a two-level partition with shared-memory ranks (`radix`), or the "
        "radix sort from 2^22 scalars when at least half the windows' entries are there "
        "(`auto`)",
    ),
    Setting(
        "PROVETOP_MSM_HOST_CHUNK",
        "msm_host_chunk",
        _int_at_least("PROVETOP_MSM_HOST_CHUNK", 1 << 10),
        "points (default 4194304 = 2^22)",
        "chunk of an MSM whose points stream from host memory (two device buffers of this many "
        "points, 96 bytes each, plus the chunk's scratch; the memory plan counts them)",
    ),
    Setting(
        "PROVETOP_MSM_HOST_CHUNK_GROW",
        "msm_host_chunk_grow",
        choice("PROVETOP_MSM_HOST_CHUNK_GROW", ON_OFF),
        "`on` (default), `off`",
        "whether the engine may stream in chunks of up to 11/4 of PROVETOP_MSM_HOST_CHUNK where "
        "the device's memory plan stays as fast (fewer chunks: fewer additions into kept "
        "buckets), or always in chunks of PROVETOP_MSM_HOST_CHUNK",
    ),
    Setting(
        "PROVETOP_MSM_HOST_BUFFERS",
        "msm_host_buffers",
        _int_at_least("PROVETOP_MSM_HOST_BUFFERS", 2),
        "2 or more (default 4)",
        "point buffers of the engine's one streamed pass: the copy stream runs this many "
        "chunks less one ahead of the sums (more hide the copy-bound chunks' copies of large "
        "chunks, at 96 bytes a point each; the memory plan counts them)",
    ),
    Setting(
        "PROVETOP_MSM_HOST_LEAD",
        "msm_host_lead",
        _auto_or_int_at_least("PROVETOP_MSM_HOST_LEAD", 0),
        "`auto` (default), 0 or more",
        "H's chunks the engine's one streamed pass takes before the first chunk of L, A or "
        "B-G1: room for the aux scalars' copy when they go up whole (`auto`: 5), none when "
        "the pass reads them from host memory chunk by chunk (`auto`: 0; a lead leaves fewer "
        "of H's chunks to hide the other queries' copies under)",
    ),
    Setting(
        "PROVETOP_CUBIN_DIR",
        "cubin_dir",
        _text,
        "a folder (default: the package's prebuilt cubins)",
        "where nvcc-built cubins are looked for before compiling with NVRTC",
    ),
    Setting(
        "PROVETOP_INJECT_DIR",
        "inject_dir",
        _text,
        "a folder (default: `~/.cache/provetop/inject`)",
        "where the trace library is built and looked for (the package's folder may be read-only)",
    ),
    Setting(
        "PROVETOP_CUPTI",
        "cupti_dir",
        _text,
        "a folder (default: the `nvidia-cuda-cupti` wheel, then the CUDA toolkit)",
        "the CUPTI (headers and `libcupti.so`) the trace library is built against, tried first",
    ),
    Setting(
        "PROVETOP_COMMIT",
        "commit",
        _text,
        "a commit (default: `git rev-parse HEAD`)",
        "the commit written into bench results and recordings where git is not there",
    ),
)


def read(settings: tuple[Setting, ...], environ: Mapping[str, str]) -> dict[str, Any]:
    """``{field: parsed value}`` for each setting present in ``environ``."""
    return {s.field: s.parse(environ[s.env]) for s in settings if s.env in environ}


def markdown_table(settings: tuple[Setting, ...]) -> str:
    """The README's table of settings, one row per variable, in the order given."""
    rows = ["| variable | values | what it changes |", "| --- | --- | --- |"]
    rows += [f"| `{s.env}` | {s.values} | {s.doc} |" for s in settings]
    return "\n".join(rows) + "\n"
