//! The replay window of a secure session: 64-bit packet counters, RFC 6479's bitmap as a ring
//! of bytes (WireGuard's layout, 8-bit words). The twin of `a3m/exon/secure/replay.py`:
//! checked before the tag is verified (`fresh`), recorded after (`accept`).

/// Counters this far below the highest seen are refused as too old.
pub const WINDOW: i128 = 4096;
/// Bytes in the ring: the window and the partly filled byte of the highest counter.
pub const BYTES: i128 = WINDOW / 8 + 1;

#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// The highest counter accepted (-1: none yet).
    pub top: i128,
    pub ring: [u8; BYTES as usize],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow { top: -1, ring: [0u8; BYTES as usize] }
    }
}

impl ReplayWindow {
    /// Whether `counter` was never accepted and is not too old.
    pub fn fresh(&self, counter: u64) -> bool {
        let c = counter as i128;
        if c > self.top {
            return true;
        }
        if self.top - c >= WINDOW {
            return false;
        }
        (self.ring[((c >> 3) % BYTES) as usize] >> (c & 7)) & 1 == 0
    }

    /// Record `counter` (checked by `fresh`, its datagram authenticated).
    pub fn accept(&mut self, counter: u64) {
        let c = counter as i128;
        let i = ((c >> 3) % BYTES) as usize;
        if c > self.top {
            let w = c >> 3;
            let last = self.top >> 3;
            if w != last {
                let from = (last + 1).max(w - BYTES + 1);
                for j in from..=w {
                    self.ring[(j.rem_euclid(BYTES)) as usize] = 0;
                }
            }
            self.top = c;
        }
        self.ring[i] |= 1 << (c & 7);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_out_of_order_and_too_old() {
        let mut w = ReplayWindow::default();
        assert!(w.fresh(0));
        w.accept(0);
        assert!(!w.fresh(0));
        w.accept(5);
        assert!(w.fresh(3) && !w.fresh(5));
        w.accept(3);
        assert!(!w.fresh(3));
        w.accept(10_000);
        assert!(!w.fresh(5) && !w.fresh(10_000 - 4096) && w.fresh(10_000 - 4095));
        w.accept(u64::MAX);
        assert!(!w.fresh(u64::MAX) && w.fresh(u64::MAX - 1));
    }
}
