"""The bookkeeping of kernels/cuda/graph.py's GraphCache, with the driver calls replaced.

Why without a GPU: which key is captured when, what is evicted and freed, and what happens
when capturing fails decide whether a replay can ever run stale or leak graphs; the GPU tests
(tests/kernels/test_cuda_ntt.py) prove the replays' outputs."""

from __future__ import annotations

import pytest

from kernels.cuda import graph


class FakeDriver:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.next = 100
        self.live: set[int] = set()
        self.replayed: list[tuple[int, int]] = []
        self.recorded: list[int] = []

    def capture(self, record) -> int:
        if self.fail:
            raise graph.GraphUnavailable("no graphs here")
        record(7)  # the capture stream
        self.next += 1
        self.live.add(self.next)
        return self.next

    def replay(self, exe: int, stream: int) -> None:
        assert exe in self.live, "replayed a freed graph"
        self.replayed.append((exe, stream))

    def destroy(self, exe: int) -> None:
        self.live.remove(exe)


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    drv = FakeDriver()
    monkeypatch.setattr(graph, "capture", drv.capture)
    monkeypatch.setattr(graph, "replay", drv.replay)
    monkeypatch.setattr(graph, "destroy", drv.destroy)
    return drv


def test_a_key_is_captured_on_its_second_use_and_replayed_after(fake) -> None:
    cache = graph.GraphCache(capacity=4)
    calls: list[int] = []
    record = calls.append
    assert cache.launch(("x", 1), record, 5) is False  # first use: the caller launches
    assert calls == [] and fake.live == set()
    assert cache.launch(("x", 1), record, 5) is True  # second: captured, then replayed
    assert calls == [7] and len(fake.live) == 1
    assert cache.launch(("x", 1), record, 9) is True  # third: replayed, not captured again
    assert calls == [7]
    exe = next(iter(fake.live))
    assert fake.replayed == [(exe, 5), (exe, 9)]
    assert (cache.captures, cache.replays) == (1, 2)


def test_the_least_recently_used_graph_is_freed_beyond_capacity(fake) -> None:
    cache = graph.GraphCache(capacity=2)
    for key in ("a", "b", "c"):
        cache.launch(key, lambda s: None, 0)
        cache.launch(key, lambda s: None, 0)
    assert len(fake.live) == 2  # "a" freed
    cache.launch("b", lambda s: None, 0)  # "b" is now the most recent
    cache.launch("d", lambda s: None, 0)
    cache.launch("d", lambda s: None, 0)  # evicts "c", not "b"
    assert cache.launch("b", lambda s: None, 0) is True
    assert cache.captures == 4 and len(fake.live) == 2
    # "c" was freed: its next use is a first use again
    assert cache.launch("c", lambda s: None, 0) is False
    cache.close()
    assert fake.live == set()


def test_a_failed_capture_falls_back_to_plain_launches_for_good(fake) -> None:
    fake.fail = True
    cache = graph.GraphCache()
    assert cache.launch("k", lambda s: None, 0) is False
    assert cache.launch("k", lambda s: None, 0) is False
    assert cache.failed == "no graphs here"
    fake.fail = False
    assert cache.launch("k", lambda s: None, 0) is False  # given up, not retried per call
    assert fake.live == set() and fake.replayed == []


def test_seen_keys_are_bounded(fake) -> None:
    cache = graph.GraphCache(capacity=2)
    for i in range(100):
        cache.launch(i, lambda s: None, 0)
    assert len(cache._seen) <= 8 and fake.live == set()
