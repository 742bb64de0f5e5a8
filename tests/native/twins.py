"""Shared by the native tests: the native module (or a module-level skip), and the
differential checks of the codec (the native decoder against ``a3m.exon.wire``'s, the
specification).

Import :data:`native` first in a test module: when ``a3m._native`` cannot be imported the
whole module is skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

try:
    from a3m import _native as native
except ImportError as exc:  # (no Rust toolchain at install: the Python twins run alone)
    pytest.skip(f"a3m._native is not built ({exc}): nothing native to compare",
                allow_module_level=True)

from a3m.exon import wire

REPO = Path(__file__).resolve().parents[2]
#: The kept fuzz corpora (``native/fuzz``), one directory per target.
CORPUS = REPO / "tests" / "fuzz" / "corpus"
#: As the protocol's default (``ExonConfig.max_message_size`` is of this order).
MAX_MESSAGE = 1 << 20


def error_key(err: BaseException | None) -> Any:
    """What must be equal of two errors: class, kind, message, arguments."""
    if err is None:
        return None
    return (type(err), getattr(err, "kind", None), str(err), err.args)


def same_in_both(spec: Callable[..., Any], twin: Callable[..., Any], *args: Any,
                 errors: type[BaseException] | tuple[type[BaseException], ...] = Exception
                 ) -> tuple[str, Any]:
    """``spec(*args)`` and ``twin(*args)``: the same result, ``("ok", value)``, or the same
    error of ``errors``, ``("error", error_key(exc))``; the specification's."""
    results: list[tuple[str, Any]] = []
    for fn in (spec, twin):
        try:
            results.append(("ok", fn(*args)))
        except errors as exc:
            results.append(("error", error_key(exc)))
    py, nat = results
    shown = ", ".join(a.hex()[:160] if isinstance(a, bytes) else repr(a)[:80] for a in args)
    assert nat == py, f"{spec.__name__}({shown}): python {py}, native {nat}"
    return py


def header_both(data: bytes) -> Any:
    """``decode_header`` of both twins: the same result, or the same ``WireError``."""
    return same_in_both(wire.decode_header, native.decode_header, data, errors=wire.WireError)


def frames_both(data: bytes, offset: int, max_message_size: int = MAX_MESSAGE
                ) -> tuple[list[tuple[Any, ...]], wire.WireError | None]:
    """``decode_frames`` of both twins: the same frames before the error, the same error."""
    py_frames, py_err = wire.decode_frames(data, offset, max_message_size)
    nat_frames, nat_err = native.decode_frames(data, offset, max_message_size)
    where = f"decode_frames({data.hex()}, {offset}, {max_message_size})"
    assert nat_frames == py_frames, f"{where}: frames differ"
    assert [type(v) for f in nat_frames for v in f] == [type(v) for f in py_frames for v in f], \
        f"{where}: field types differ"
    assert error_key(nat_err) == error_key(py_err), f"{where}: python {py_err!r}, native {nat_err!r}"
    return py_frames, py_err


def datagram_both(data: bytes, max_message_size: int = MAX_MESSAGE) -> Any:
    """A whole datagram through both: the header, then (if it decodes) the frames after it,
    and the frames from offset 0 too (the decoder must take any bytes at any offset)."""
    head = header_both(data)
    frames_both(data, 0, max_message_size)
    if head[0] == "ok":
        return head, frames_both(data, head[1][2], max_message_size)
    return head, None


def encode_frame(frame: tuple[Any, ...]) -> bytes:
    """A decoded frame encoded again with ``wire``'s encoders (decoding then encoding gives
    back the bytes: every field is kept)."""
    kind = frame[0]
    if kind == wire.REQSLOTS:
        return wire.encode_reqslots(*frame[1:])
    if kind == wire.SLOTS:
        return wire.encode_slots(*frame[1:])
    if kind == wire.TOKEN:
        _, s, r, payload, index, count, total, flags = frame
        fragment = (index, count, total) if flags & wire.FLAG_FRAGMENT else None
        return wire.encode_token(s, r, payload, fragment,
                                 retransmit=bool(flags & wire.FLAG_RETRANSMIT))
    if kind == wire.ACK:
        _, r, ranges, copies = frame
        return wire.encode_ack(r, ranges, copies)
    if kind == wire.VOID:
        return wire.encode_void(frame[1])
    if kind == wire.REVOKE:
        return wire.encode_revoke(frame[1])
    if kind == wire.REVOKED:
        return wire.encode_revoked(frame[1], frame[2])
    raise AssertionError(f"unknown frame {frame!r}")
