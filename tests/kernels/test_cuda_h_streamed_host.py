"""The H step in one or two slots (kernels/cuda/h_streamed.py), its steps run on the CPU.

Why here: the sequence (which buffer holds what, when a copy goes to the host scratch, the
order of the difference, the in-place last transform and swap) is the part that differs from
the tested in-place H step; its passes run through the host build of ntt.cuh (the emulator of
test_cuda_ntt_host.py) and the elementwise steps in Python integers, against the CPU reference
on fresh random inputs, with every slot and the scratch poisoned first.
"""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

from provetop.kernels.constants import FR_MODULUS
from provetop.kernels.cpu import ntt as ref
from provetop.kernels.cuda import h_streamed as hs
from provetop.kernels.cuda import ntt_plan as npl
from tests.kernels.test_cuda_ntt_host import Emulator
from tests.kernels.test_cuda_ntt_host import emu as emu  # the fixture (host build of ntt.cuh)

R = FR_MODULUS
POISON = np.uint64(0xFFFFFFFFFFFFFFFF)


def _run(em: Emulator, steps: list[hs.Step], bufs: dict[str, np.ndarray], k: int) -> None:
    for st in steps:
        if st.op == "copy":
            np.copyto(bufs[st.dst], bufs[st.src[0]])
        elif st.op == "passes":
            em.run(list(st.passes), bufs, 1, k)
        elif st.op in ("mul", "sub"):
            x, y = (npl.from_words(bufs[name], True) for name in st.src)
            if st.op == "mul":
                out = [u * v % R for u, v in zip(x, y, strict=True)]
            else:
                out = [(u - v) % R for u, v in zip(x, y, strict=True)]
            np.copyto(bufs[st.dst], npl.to_words(out, True))
        elif st.op == "swap":
            idx = ref.bitrev_indices(k)
            bufs[st.dst][:] = bufs[st.dst][np.asarray(idx, dtype=np.int64)]
        else:
            raise AssertionError(st.op)


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 6, 11])
def test_streamed_h_step_matches_reference(emu: ctypes.CDLL, slots: int, k: int) -> None:
    n = 1 << k
    rng = random.Random()
    a = [rng.randrange(R) for _ in range(n)]
    b = [rng.randrange(R) for _ in range(n)]
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    c[n // 2] = (c[n // 2] + 1) % R  # not a satisfied system: every coefficient matters
    bufs = {name: npl.to_words(v, True) for name, v in (("a", a), ("b", b), ("c", c))}
    inputs = {name: arr.copy() for name, arr in bufs.items()}
    for name in ("P", "Q", "S"):
        bufs[name] = np.full((n, 4), POISON, dtype=np.uint64)
    steps = hs.plan_streamed_h_step(k, slots)
    _run(Emulator(emu), steps, bufs, k)
    want = [int(v) for v in ref.h_step_objects(*(ref._as_objects(v) for v in (a, b, c)))]
    assert npl.from_words(bufs["P"], False) == want  # all n (the last is not zero here)
    for name, arr in inputs.items():  # the witness is read, never written
        assert np.array_equal(bufs[name], arr), name
    used = {name for st in steps for name in (st.dst, *st.src)}
    assert used == ({"a", "b", "c", "P", "Q"} if slots == 2 else {"a", "b", "c", "P", "S"})


def test_every_transform_runs_in_place() -> None:
    """No pass gathers or reads another buffer: the property that lets one slot suffice."""
    for slots in (1, 2):
        for st in hs.plan_streamed_h_step(20, slots):
            for p in st.passes:
                assert p.src == p.dst == st.dst
                assert not p.flags & npl.F_GATHER
                assert p.qa is None and p.qb is None


def test_bad_slot_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="slots"):
        hs.plan_streamed_h_step(4, 3)
    with pytest.raises(ValueError, match="n >= 2"):
        hs.plan_streamed_h_step(0, 1)
