"""The embedded server's retryable-write prune (svc/subprocesses/embedded_db_child.py) drops exactly what
SecantusDB's own prune drops, from the oldest end instead of scanning and sorting every record
on each write (bench/embedded_writes.py measures the difference)."""

from __future__ import annotations

import random

import pytest
from secantus import transactions
from secantus.transactions import TransactionRegistry

from svc.subprocesses import embedded_db_child
from svc.subprocesses.embedded_db_child import prune_retryable_in_order

LIFETIME = transactions._RETRYABLE_RECORD_LIFETIME_SECONDS


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class InOrder(TransactionRegistry):
    _prune_retryable_locked = prune_retryable_in_order


def test_the_same_records_are_kept_as_by_the_library_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "_RETRYABLE_RECORD_MAX", 40)  # the cap, reached quickly
    clock = Clock()
    theirs, ours = TransactionRegistry(time_func=clock), InOrder(time_func=clock)
    rng = random.Random(23)
    full = 0
    for number in range(2_000):
        # Bursts of writes, pauses past the records' lifetime, and everything in between.
        clock.now += rng.choices([0.0, 0.5, 30.0, LIFETIME / 3, LIFETIME + 1], [40, 40, 15, 4, 1])[0]
        session = bytes([rng.randrange(8)])
        for registry in (theirs, ours):
            registry.record_retryable(session, number, b"cmd", {"ok": 1.0, "n": 1})
        assert list(ours._retryable) == list(theirs._retryable), number
        assert len(ours._retryable) <= 40
        full += len(ours._retryable) == 40
    assert full > 100  # the cap was reached, not only the lifetime
    # A look-up prunes too: after a long pause every record has expired.
    clock.now += LIFETIME + 1
    assert ours.retryable_reply(b"\x00", 1_999, b"cmd") is None
    assert ours._retryable == {}


def test_a_record_is_still_replayed_within_its_lifetime() -> None:
    clock = Clock()
    registry = InOrder(time_func=clock)
    registry.record_retryable(b"s", 7, b"cmd", {"ok": 1.0, "n": 1})
    clock.now += LIFETIME - 1
    assert registry.retryable_reply(b"s", 7, b"cmd") == {"ok": 1.0, "n": 1}
    assert registry.retryable_reply(b"s", 7, b"another command") is None


def test_the_child_installs_it_over_the_library_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    # setattr first so that the class is restored after the test.
    monkeypatch.setattr(
        TransactionRegistry, "_prune_retryable_locked", TransactionRegistry._prune_retryable_locked
    )
    embedded_db_child._install_prune()
    assert TransactionRegistry._prune_retryable_locked is prune_retryable_in_order
