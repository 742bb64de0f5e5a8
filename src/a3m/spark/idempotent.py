"""Idempotent delivery from the Spark sink, as Kafka's idempotent producer does it: each
message carries its producer's identity and a sequence number, and the receiving side drops
what it has already seen.

The sink (option ``idempotent=true``) names each task's output ``<queryId>/<batchId>/
<partition>``: the same for every attempt of that task, also after a query or driver restart
(the query id lives in the checkpoint). It sorts the task's rows by payload, so a retried
attempt sends the same rows in the same order (Spark replays a batch with the same rows, not
always in the same order), and numbers them from 0. A retry after a hard kill (the worker
died between sending and writing its ledger marker) sends them again; the receiver's
:class:`Deduplicator` keeps, per producer, the next sequence it expects and drops anything
below it.

Envelope (big-endian): ``b"\\xa3I"``, producer id length (1 byte), producer id (UTF-8),
sequence (8 bytes), then the payload.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections import OrderedDict
from pathlib import Path

MAGIC = b"\xa3I"
_SEQ = struct.Struct(">Q")


def wrap(producer: str, seq: int, payload: bytes) -> bytes:
    """``payload`` in its envelope."""
    pid = producer.encode()
    if len(pid) > 255:
        raise ValueError("a producer id is at most 255 bytes")
    return MAGIC + bytes([len(pid)]) + pid + _SEQ.pack(seq) + payload


def unwrap(message: bytes) -> tuple[str, int, bytes]:
    """``(producer, seq, payload)``; ValueError for a message without a valid envelope."""
    if len(message) < 3 or message[:2] != MAGIC:
        raise ValueError("not an idempotent-sink message (no envelope)")
    n = message[2]
    end = 3 + n + _SEQ.size
    if len(message) < end:
        raise ValueError("truncated envelope")
    try:
        producer = message[3:3 + n].decode()
    except UnicodeDecodeError as exc:
        raise ValueError("producer id is not UTF-8") from exc
    return producer, _SEQ.unpack_from(message, 3 + n)[0], message[end:]


class Deduplicator:
    """The receiving side: ``accept(message)`` returns the payload the first time a
    (producer, sequence) comes, None for a repeat (or raises ValueError for a message
    without an envelope).

    A producer's messages are expected in sequence order (one task's messages on one A3M link
    are in order): the state is one number per producer, the next sequence expected. At most
    ``max_producers`` are kept, the least recently seen forgotten first (a producer is one
    task: it is not heard from again once its batch is done). With ``path``, the state is
    loaded from and :meth:`save`\\ d to that file (atomically): save it together with what you
    did with the payloads, so that a restarted receiver still knows what it has seen.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 max_producers: int = 100_000) -> None:
        self.path = None if path is None else Path(path)
        self.max_producers = max_producers
        self.next: OrderedDict[str, int] = OrderedDict()
        self.accepted = 0
        self.duplicates = 0
        if self.path is not None and self.path.exists():
            self.next.update(json.loads(self.path.read_text()))

    def accept(self, message: bytes) -> bytes | None:
        producer, seq, payload = unwrap(message)
        expected = self.next.get(producer, 0)
        if seq < expected:
            self.duplicates += 1
            self.next.move_to_end(producer)
            return None
        self.next[producer] = seq + 1
        self.next.move_to_end(producer)
        if len(self.next) > self.max_producers:
            self.next.popitem(last=False)
        self.accepted += 1
        return payload

    def save(self) -> None:
        """Write the state to ``path`` (fsync'd, renamed into place)."""
        if self.path is None:
            raise ValueError("this Deduplicator has no path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "w") as f:
            json.dump(self.next, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
