"""The ``CUZK_TIMING`` vocabulary: which key a line carries, where in a GPU call cuzk prints it,
and the ``partition_done`` phase it times.

A ``CUZK_TIMING`` line names no job, no worker and no time; the converter attributes it in order
to the oldest GPU call that has not yet received a line of its kind (its *slot*,
:func:`timing_slot`), so these tables are what that attribution and the phases rest on.
"""

from __future__ import annotations

from provetop.sources.cuzk.parse import TimingLine

# CUZK_TIMING keys, by where in a GPU call they are printed.
REGION_KEYS = ("ntt_msm_h_ms", "batch_add_ms", "tail_msm_ms", "mutex_wait_ms", "mutex_held_ms")
CALL_KEYS = (
    "split_vectors_ms",
    "prep_msm_ms",
    "b_g2_msm_ms",
    "epilogue_ms",
    "host_register",
)
AFTER_KEYS = ("async_dealloc_ms",)
REGION_SLOTS = frozenset(REGION_KEYS) | {"prestage_vram", "prestage_setup"}
# Pre-stage lines are outcomes of the GPU call that prints them, and one call may print more
# than one: ``prestage_vram`` then its setup line, ``skip_vram`` or ``host_register=fallback``
# then ``prestage_setup=fallback``. A line that may follow the call's last pre-stage line
# belongs to that call; any other starts the next call's pre-stage.
PRESTAGE_SLOTS = frozenset({"prestage_vram", "prestage_setup", "host_register"})
PRESTAGE_FOLLOWS = {
    "vram": frozenset({"ok", "skip_vram", "fallback"}),
    "skip_vram": frozenset({"fallback"}),
    "host_register": frozenset({"fallback", "skip_vram"}),
}
# CUZK_TIMING key -> phases_ms name in partition_done
PHASE_MS = {
    "split_vectors_ms": "split_vectors",
    "ntt_msm_h_ms": "ntt_msm_h",
    "batch_add_ms": "batch_add",
    "tail_msm_ms": "tail_msm",
    "prep_msm_ms": "prep_msm",
    "b_g2_msm_ms": "b_g2_msm",
    "epilogue_ms": "epilogue",
}


def timing_slot(rec: TimingLine) -> str | None:
    """Which kind of CUZK_TIMING line this is (the key used for in-order attribution)."""
    if "prestage_vram" in rec.tags:
        return "prestage_vram"
    for key in ("prestage_setup", "host_register"):
        if key in rec.fields:
            return key
    for key in REGION_KEYS + CALL_KEYS + AFTER_KEYS:
        if key in rec.fields:
            return key
    if "gpu_total_ms" in rec.fields:
        return "tail_msm_ms"
    return None
