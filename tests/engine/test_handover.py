"""The H-block hand-over's protocol (provetop.engine.memory.handover), with recorded copies for
CUDA's."""

from __future__ import annotations

import threading

from provetop.engine.memory.handover import Handover


class Copies:
    """A taker's copier: records (block, lo, hi, event) in the order they were queued."""

    def __init__(self) -> None:
        self.made: list[tuple[str, int, int, str]] = []

    def bind(self, block):
        def copy(lo, hi, event):
            self.made.append((block, lo, hi, event))

        return copy


def test_a_taker_that_comes_mid_pass_copies_the_read_rows_at_once_then_each_as_read():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 40)
    ho.read(offer, 0, 10, "e0")
    ho.read(offer, 10, 20, "e1")
    taker = ho.take(c.bind, 40, owner=1)
    assert c.made == [("H", 0, 10, "e0"), ("H", 10, 20, "e1")]
    ho.read(offer, 20, 30, "e2")
    assert c.made[-1] == ("H", 20, 30, "e2")
    assert ho.close(offer, "final") == (True, None)
    assert taker.block == "H" and taker.final == "final"
    assert taker.uncovered() == [(30, 40)]  # the taker copies these after "final"


def test_a_claim_made_before_the_offer_meets_it():
    ho, c = Handover(), Copies()
    taker = ho.take(c.bind, 20, owner=1)
    assert taker is not None and c.made == []
    offer = ho.open("H", 20)
    ho.read(offer, 0, 20, "e0")
    assert c.made == [("H", 0, 20, "e0")]
    assert ho.close(offer, "f") == (True, None)
    assert taker.uncovered() == []


def test_without_a_taker_the_giver_keeps_its_block():
    ho = Handover()
    offer = ho.open("H", 8)
    ho.read(offer, 0, 8, "e0")
    assert ho.close(offer, "f") == (False, None)
    assert ho.owed_elsewhere(1) is None  # nothing handed: no region has to wait


def test_one_claim_per_offer_and_a_block_too_small_is_not_taken():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 16)
    assert ho.take(c.bind, 32) is None  # a larger a than H's block
    assert ho.take(c.bind, 16, owner=1) is not None
    assert ho.take(c.bind, 16, owner=2) is None
    ho.close(offer, "f")
    # a second pending claim while one waits is refused too
    ho2 = Handover()
    assert ho2.take(c.bind, 4, owner=1) is not None
    assert ho2.take(c.bind, 4, owner=2) is None


def test_a_withdrawn_taker_gets_no_more_ranges_and_the_giver_frees_after_its_copies():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 30)
    ho.read(offer, 0, 10, "e0")
    taker = ho.take(c.bind, 30, owner=1)
    assert ho.withdraw(taker, lambda: "drained") is None
    ho.read(offer, 10, 20, "e1")
    assert c.made == [("H", 0, 10, "e0")]
    assert ho.close(offer, "f") == (False, "drained")


def test_a_taker_withdrawing_after_the_hand_over_gets_the_block_to_free():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 10)
    taker = ho.take(c.bind, 10, owner=1)
    ho.close(offer, "f")
    assert ho.withdraw(taker, lambda: "unused") == "H"
    assert ho.owed_elsewhere(0) is None


def test_rows_beyond_the_takers_a_are_not_copied():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 40)
    ho.take(c.bind, 25, owner=1)
    ho.read(offer, 20, 30, "e")
    ho.read(offer, 30, 40, "e2")
    assert c.made == [("H", 20, 25, "e")]


def test_a_block_owed_to_the_other_worker_holds_back_the_giver_until_adopted():
    ho, c = Handover(), Copies()
    offer = ho.open("H", 10)
    taker = ho.take(c.bind, 10, owner=1)
    ho.close(offer, "f")
    assert ho.owed_elsewhere(0) is taker  # the giver took the mutex back first
    assert ho.owed_elsewhere(1) is None  # the taker itself goes on
    assert not ho.wait_settled(taker, 0.01)
    t = threading.Timer(0.05, ho.adopted, (taker,))
    t.start()
    assert ho.wait_settled(taker, 5.0)
    t.join()
    assert ho.owed_elsewhere(0) is None


def test_a_copy_that_cannot_be_queued_stalls_the_taker_not_the_giver():
    """The copier runs on the giver's thread, inside its pass: its failure must not raise
    there. The taker stops receiving ranges and, once it adopts the block, copies every range
    not covered itself."""
    ho = Handover()
    made = []

    def bind(block):
        def copy(lo, hi, event):
            if lo == 10:
                raise RuntimeError("cudaErrorInvalidValue")
            made.append((lo, hi))

        return copy

    offer = ho.open("H", 40)
    taker = ho.take(bind, 40, owner=1)
    for lo in range(0, 40, 10):
        ho.read(offer, lo, lo + 10, f"e{lo}")  # never raises
    assert made == [(0, 10)] and taker.stalled
    assert ho.close(offer, "f") == (True, None)
    assert taker.uncovered() == [(10, 40)]
