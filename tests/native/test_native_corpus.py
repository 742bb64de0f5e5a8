"""The kept fuzz corpora (``tests/fuzz/corpus/<target>/``, made by ``native/fuzz``) replayed
through both twins: every codec file decodes to the same header, frames and error in the
native codec and in ``a3m.exon.wire`` (from the header's offset and from the first bytes, at
the fuzz targets' two message-size bounds), and every ``aead_open`` file opens to the same
plaintext, or to None, in the native Cipher and in PyCipher (the targets' fixed key), and
every ``split_batch`` file splits to the same payloads, or the same refusal, in both, and
every ``decode_sequenced`` file reads to the same fields, or the same refusal, and every
``exchange_offer`` file that the core reads as a FLOW reads to the same fields natively
(``decode_flow``), and no other does.

The Rust side (``native/tests/corpus_replay.rs``) replays the same files through the
targets' own checks; this side compares the twins on what the fuzzer found interesting.
"""

from __future__ import annotations

import pytest

from a3m.exon.secure.aead import PyCipher

from .test_native_batch import split_both
from .test_native_exchange import flow_both
from .test_native_sequenced import decode_both
from .twins import CORPUS, datagram_both, frames_both, native

#: The fuzz targets' bounds and key (native/fuzz/checks.rs: MAX_MESSAGE_SIZES, KEY).
MAX_MESSAGE_SIZES = [1 << 20, (1 << 64) - 1]
KEY = bytes([0x42]) * 32
TARGETS = ["aead_open", "decode_frames", "decode_header", "decode_sequenced", "exchange_offer",
           "split_batch"]


def files(target: str) -> list[pytest.ParameterSet]:
    paths = sorted(p for p in (CORPUS / target).iterdir() if p.is_file()) \
        if (CORPUS / target).is_dir() else []
    return [pytest.param(p.read_bytes(), id=p.name[:12]) for p in paths]


def test_every_target_has_a_corpus() -> None:
    assert sorted(p.name for p in CORPUS.iterdir()) == TARGETS
    for target in TARGETS:
        assert files(target), f"tests/fuzz/corpus/{target} is empty"


@pytest.mark.parametrize("data", files("decode_frames") + files("decode_header"))
def test_the_codec_corpus_decodes_the_same_in_both(data: bytes) -> None:
    for mms in MAX_MESSAGE_SIZES:
        datagram_both(data, mms)
    # and from each of the first offsets (a frame may start anywhere)
    for offset in range(1, min(len(data), 48) + 1):
        frames_both(data, offset)


@pytest.mark.parametrize("data", files("aead_open"))
def test_the_aead_corpus_opens_the_same_in_both(data: bytes) -> None:
    assert PyCipher(KEY).open(data) == native.Cipher(KEY).open(data)


@pytest.mark.parametrize("data", files("split_batch"))
def test_the_batch_corpus_splits_the_same_in_both(data: bytes) -> None:
    split_both(data)


@pytest.mark.parametrize("data", files("decode_sequenced"))
def test_the_sequenced_corpus_reads_the_same_in_both(data: bytes) -> None:
    decode_both(data)


@pytest.mark.parametrize("data", files("exchange_offer"))
def test_the_exchange_corpus_reads_its_flows_the_same_in_both(data: bytes) -> None:
    flow_both(data)


def test_some_of_the_aead_corpus_opens() -> None:
    opened = [d for d in (p.values[0] for p in files("aead_open"))
              if len(d) >= 14 and PyCipher(KEY).open(d) is not None]
    assert opened, "nothing of the aead_open corpus opens with the targets' key"
