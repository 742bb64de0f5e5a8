//! The engine's counters: the fields of `ExonStats` (`a3m/exon/state.py`) that Exon itself
//! counts (the secure layer counts its own on the host's object).

macro_rules! stats {
    ($($name:ident),* $(,)?) => {
        /// Counters (added to since the host last took them: `take`).
        #[derive(Debug, Default, Clone)]
        pub struct Stats { $(pub $name: i64,)* }

        impl Stats {
            /// Every counter's name, in `ExonStats`' order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            /// The counters that moved, with how much, and zero them.
            pub fn take(&mut self) -> Vec<(&'static str, i64)> {
                let mut out = Vec::new();
                $(if self.$name != 0 { out.push((stringify!($name), self.$name)); self.$name = 0; })*
                out
            }
        }
    };
}

stats!(
    datagrams_in, datagrams_out, bytes_in, bytes_out, frames_in, frames_out, malformed,
    truncated, wrong_dst, from_self, tokens_sent, retransmits, fast_retransmits,
    spurious_retransmits, probe_timeouts, probe_copies, probes_deferred, congestion_events,
    pacer_holds, reqslots_sent, reqslots_retransmits, slot_stalls, delivered, delivered_bytes,
    duplicates, stale_frames, reassembly_errors, no_address, address_changes,
    send_records_created, send_records_discarded, recv_records_created, recv_records_discarded,
    probes_sent, grants_deferred, voids_sent, voids_received, revokes_sent, revokes_received,
    revocations_abandoned, outcome_unknown, resent_whole, linger_answers, peers_unreachable,
    peers_reachable, peers_abandoned, not_delivered, plain_refused, secure_refused, spoofed,
    data_first,
);
