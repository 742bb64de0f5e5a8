//! The node clock `ck` (twin of `a3m/exon/clock.py`'s `NodeClock`): reads are free,
//! reservations go to the store (the host's), durable before they return.

/// Where the clock's high-water mark lives (the host's: a file, memory).
pub trait ClockStore {
    fn load(&mut self) -> u64;
    fn reserve(&mut self, upto: u64);
}

pub struct NodeClock {
    pub value: u64,
    reserved: u64,
    block: u64,
}

impl NodeClock {
    pub fn new(store: &mut dyn ClockStore, block: u64) -> NodeClock {
        let value = store.load();
        store.reserve(value + block);
        NodeClock { value, reserved: value + block, block }
    }
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
    pub fn cover(&mut self, store: &mut dyn ClockStore, upto: u64) {
        if upto > self.reserved {
            let mark = upto + self.block;
            store.reserve(mark);
            self.reserved = mark;
        }
    }
    pub fn advance_to(&mut self, store: &mut dyn ClockStore, value: u64) {
        if value > self.value {
            self.cover(store, value);
            self.value = value;
        }
    }
    pub fn take(&mut self, store: &mut dyn ClockStore) -> u64 {
        let v = self.value;
        self.cover(store, v + 1);
        self.value = v + 1;
        v
    }
}
