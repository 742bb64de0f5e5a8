"""The native BATCH twins (``a3m._native.batch_runs`` / ``split_batch``) against
``a3m.core.message``'s (the specification): the same messages from the same payloads, head,
sequence number and limit; the same payloads, or the same ``ProtocolViolation``, from the same
body: over edge cases, hypothesis-generated runs, and random, mutated and cut bodies
(derandomized: the same examples on every run). The core runs the native twins where
``a3m.NATIVE`` (``message.BATCH_RUNS``, ``SPLIT_BATCH``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.core import message as m
from a3m.errors import ProtocolViolation

from .twins import native, same_in_both

CONFIRM = 1 << 63
SETTINGS = settings(max_examples=400, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def split_both(body: bytes) -> Any:
    return same_in_both(m.split_batch, native.split_batch, body, errors=ProtocolViolation)


def runs_both(head: bytes, seq: int, payloads: list[bytes], limit: int) -> list[bytes]:
    py = m.batch_runs(head, seq, payloads, limit)
    nat = native.batch_runs(head, seq, payloads, limit)
    assert nat == py, f"batch_runs(limit={limit}, sizes={list(map(len, payloads))})"
    return py


def test_the_core_runs_the_native_twins() -> None:
    assert m.BATCH_RUNS is native.batch_runs
    assert m.SPLIT_BATCH is native.split_batch


@pytest.mark.parametrize("body", [
    b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x00",  # cut short, count 0
    b"\xff\xff\xff\xff", b"\x00\x00\x00\x02\x00\x00\x00\x01",  # counts that do not fit
    b"\x00\x00\x00\x01\x00\x00\x00\x02a", b"\x00\x00\x00\x01\x00\x00\x00\x01ab",
    b"\x00\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x0d",  # lengths summing past 32 bits
    b"\x00\x00\x00\x01\x00\x00\x00\x00", b"\x00\x00\x00\x02" + bytes(8),  # empty payloads
])
def test_edge_bodies(body: bytes) -> None:
    split_both(body)


def test_every_refusal_of_the_specification_is_reached() -> None:
    texts = {r[1][2] for r in map(split_both, [b"", b"\x00\x00\x00\x00",
                                            b"\x00\x00\x00\x01\x00\x00\x00\x02a"])}
    assert texts == {f"bad middleware message: {why}" for why in (
        "BATCH cut short", "BATCH count does not fit", "BATCH lengths do not match its size")}


payloads = st.lists(st.binary(max_size=300) | st.sampled_from([b"", b"x" * 2000]),
                    min_size=2, max_size=40)


@SETTINGS
@given(payloads, st.binary(max_size=40), st.integers(0, (1 << 62)) | st.just(CONFIRM + 1),
       st.integers(0, 5000) | st.sampled_from([0, 4, 60000]))
def test_runs_and_their_bodies(ps: list[bytes], head: bytes, seq: int, limit: int) -> None:
    out = runs_both(head, seq, ps, limit)
    # what they carry, split back: every payload once, in order (both splitters agree)
    got: list[bytes] = []
    for one in out:
        mtype = one[3]
        body = one[8 + len(head) + 8:]
        if mtype == m.BATCH:
            kind, *rest = split_both(body)
            assert kind == "ok"
            got += rest[0]
        else:
            assert mtype == m.DATA
            got.append(body)
    assert got == ps


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bodies(body: bytes) -> None:
    split_both(body)


@SETTINGS
@given(payloads, st.data())
def test_mutated_and_cut_bodies(ps: list[bytes], data: st.DataObject) -> None:
    body = m.encode_batch_body(ps)
    cut = data.draw(st.integers(0, len(body)))
    split_both(body[:cut])
    at = data.draw(st.integers(0, len(body) - 1))
    flip = data.draw(st.integers(1, 255))
    split_both(body[:at] + bytes([body[at] ^ flip]) + body[at + 1:])


def test_payloads_other_than_bytes_are_refused_natively() -> None:
    with pytest.raises(TypeError):
        native.batch_runs(b"", 1, [b"a", bytearray(b"b")], 100)
