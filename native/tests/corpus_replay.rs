//! The kept fuzz corpora (`tests/fuzz/corpus/<target>/`, made by `native/fuzz`) replayed on
//! every `cargo test`: each file through the checks its target makes (`native/fuzz/checks.rs`:
//! no panic, errors "truncated" or "malformed", decoded frames lying back to back and TOKEN
//! and ACK re-encoding to their bytes, what opens sealing back, a split BATCH body and a read message made again). The codec's corpora go through
//! both decoders' checks. A failing file is named.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

const TARGETS: [&str; 6] = ["aead_open", "decode_frames", "decode_header", "decode_sequenced", "exchange_offer", "split_batch"];

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz/corpus")
}

/// Every file of one target's corpus, sorted by name.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_root().join(target);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{}: an empty corpus", dir.display());
    paths
        .into_iter()
        .map(|p| {
            let data = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect()
}

/// Run `check` on every file of `target`'s corpus; fail naming each file that failed.
fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let files = corpus(target);
    let failed: Vec<String> = files
        .iter()
        .filter(|(_, data)| catch_unwind(AssertUnwindSafe(|| check(data))).is_err())
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(failed.is_empty(), "{target}: {} of {} files fail: {failed:#?}", failed.len(), files.len());
    files.len()
}

#[test]
fn every_corpus_directory_is_replayed() {
    let mut dirs: Vec<String> = fs::read_dir(corpus_root())
        .expect("tests/fuzz/corpus")
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs, TARGETS, "a corpus directory without a replay here (or one missing)");
}

/// `replay` with a check that also says whether a file got through (opened, split): how many
/// did.
fn replay_counting(target: &str, check: impl Fn(&[u8]) -> bool) -> usize {
    let passed = std::cell::Cell::new(0);
    replay(target, |data| passed.set(passed.get() + usize::from(check(data))));
    passed.get()
}

#[test]
fn decode_frames_corpus() {
    replay("decode_frames", checks::datagram);
}

#[test]
fn decode_header_corpus() {
    replay("decode_header", checks::datagram);
}

#[test]
fn aead_open_corpus() {
    // The key still opens what it sealed: the corpus was made with checks::KEY.
    let opened = replay_counting("aead_open", |data| checks::open(data).is_some());
    assert!(opened > 0, "no datagram of the aead_open corpus opens with checks::KEY");
}

#[test]
fn split_batch_corpus() {
    let split = replay_counting("split_batch", |data| checks::split_batch(data).is_some());
    assert!(split > 0, "no body of the split_batch corpus splits");
}

#[test]
fn decode_sequenced_corpus() {
    let read = replay_counting("decode_sequenced", checks::decode_sequenced);
    assert!(read > 0, "no message of the decode_sequenced corpus reads");
}

#[test]
fn the_corpora_stay_small() {
    for target in TARGETS {
        let files = corpus(target);
        assert!(files.len() <= 200, "{target}: {} files (minimize: docs/testing.md)", files.len());
        for (p, data) in &files {
            assert!(data.len() <= 8192, "{}: {} bytes", p.display(), data.len());
        }
    }
}

#[test]
fn exchange_offer_corpus() {
    let taken = replay_counting("exchange_offer", checks::exchange_offer);
    assert!(taken > 0, "no file of the exchange corpus is a message a lent socket takes");
}
