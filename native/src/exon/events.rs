//! Events the engine hands to its host (twins of `a3m/exon/events.py`).

use std::sync::Arc;

use super::records::Rid;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Delivered { source: Arc<str>, payload: Vec<u8> },
    ReceiptReady { receipt_id: i64 },
    Writable,
    OutcomeUnknown { destination: Arc<str>, payload: Vec<u8>, receipt_id: Rid },
    NotDelivered { destination: Arc<str>, payload: Vec<u8>, receipt_id: Rid },
    PeerUnreachable { peer: Arc<str>, silent_s: f64 },
    PeerReachable { peer: Arc<str> },
}
