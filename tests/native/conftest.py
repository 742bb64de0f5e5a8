"""The native tests: no panic may be caught at the native boundary during any of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    from a3m import _native
except ImportError:  # (the test modules skip themselves, with the reason)
    _native = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def no_native_panic() -> Iterator[None]:
    """A panic is caught and raised as NativePanic; a test could swallow that, the count
    cannot."""
    before = _native.panics() if _native is not None else 0
    yield
    if _native is not None:
        assert _native.panics() == before, "a panic was caught in a3m._native"
